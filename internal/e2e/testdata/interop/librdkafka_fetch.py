"""librdkafka through confluent-kafka: consume in a group until WANT records
are read (then, with DRAIN=drain, whatever else comes within a second),
commit, and print each record's topic and key."""
import sys, time
from confluent_kafka import Consumer, KafkaError

addr, group, want, drain, topics = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == 'drain', sys.argv[5:]
c = Consumer({'bootstrap.servers': addr, 'group.id': group, 'auto.offset.reset': 'earliest',
              'enable.auto.commit': False, 'topic.metadata.refresh.interval.ms': 500})
c.subscribe(topics)
n, deadline = 0, time.time() + 60
while n < want and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    if m.error():
        # A subscribed topic that was deleted is reported, not fatal.
        if m.error().code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
            continue
        sys.exit('consume error: %s' % m.error())
    print('record', m.topic(), m.key().decode())
    n += 1
# Nothing more may arrive: every record was produced before the start.
end = time.time() + (1 if drain else 0)
while time.time() < end:
    m = c.poll(0.2)
    if m is not None and not m.error():
        print('record', m.topic(), m.key().decode())
        n += 1
if n:
    c.commit(asynchronous=False)
c.close()
print('consumed', n)

"""librdkafka through confluent-kafka: produce, consume in a group, commit."""
import sys, time
from confluent_kafka import Consumer, Producer

addr, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({'bootstrap.servers': addr, 'compression.type': 'lz4', 'enable.idempotence': True})
for i in range(n):
    p.produce(topic, key=str(i), value='%s-%d' % (topic, i))
    p.poll(0)
if p.flush(30) != 0:
    sys.exit('produce did not finish')
c = Consumer({'bootstrap.servers': addr, 'group.id': topic + '-group',
              'auto.offset.reset': 'earliest', 'enable.auto.commit': False})
c.subscribe([topic])
keys, deadline = set(), time.time() + 30
while len(keys) < n and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    if m.error():
        sys.exit('consume error: %s' % m.error())
    keys.add(m.key())
c.commit(asynchronous=False)
c.close()
print('consumed', len(keys))
sys.exit(0 if len(keys) == n else 1)

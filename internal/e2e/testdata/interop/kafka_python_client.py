"""kafka-python: produce keyed records, consume them in a group, commit."""
import sys
from kafka import KafkaConsumer, KafkaProducer

addr, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = KafkaProducer(bootstrap_servers=addr, compression_type='gzip')
for i in range(n):
    p.send(topic, key=str(i).encode(), value=('%s-%d' % (topic, i)).encode())
p.flush()
p.close()
c = KafkaConsumer(topic, bootstrap_servers=addr, group_id=topic + '-group',
                  auto_offset_reset='earliest', enable_auto_commit=False,
                  consumer_timeout_ms=15000)
keys = set()
for m in c:
    keys.add(m.key)
    if len(keys) == n:
        break
c.commit()
c.close()
print('consumed', len(keys))
sys.exit(0 if len(keys) == n else 1)

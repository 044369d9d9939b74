"""Topic configs through confluent-kafka (librdkafka) or kafka-python: create a
topic with configs, change them with AlterConfigs, read them back with
DescribeConfigs, and have a bad value refused. Prints one line per check."""
import sys

module, addr, topic = sys.argv[1], sys.argv[2], sys.argv[3]


def confluent():
    from confluent_kafka.admin import AdminClient, NewTopic, ConfigResource
    from confluent_kafka import KafkaException
    a = AdminClient({'bootstrap.servers': addr})
    for f in a.create_topics([NewTopic(topic, 1, 1, config={'retention.ms': '7200000', 'cleanup.policy': 'compact'})]).values():
        f.result(30)
    res = ConfigResource('topic', topic)
    desc = lambda: a.describe_configs([res])[res].result(30)
    c = desc()
    print('created retention.ms=%s cleanup.policy=%s' % (c['retention.ms'].value, c['cleanup.policy'].value))
    a.alter_configs([ConfigResource('topic', topic, set_config={'max.message.bytes': '50000'})])[res].result(30)
    c = desc()
    print('altered max.message.bytes=%s retention.ms=%s' % (c['max.message.bytes'].value, c['retention.ms'].value))
    try:
        a.alter_configs([ConfigResource('topic', topic, set_config={'retention.ms': 'often'})])[res].result(30)
        print('bad value accepted')
    except KafkaException as e:
        print('bad value refused: %s' % e.args[0].name())


def kafka_python():
    from kafka.admin import KafkaAdminClient, NewTopic, ConfigResource, ConfigResourceType
    a = KafkaAdminClient(bootstrap_servers=addr)
    a.create_topics([NewTopic(topic, 1, 1, topic_configs={'retention.ms': '7200000', 'cleanup.policy': 'compact'})])

    def desc():
        resp = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        out = {}
        for r in resp:
            for res in r.resources:
                for entry in res[4]:
                    out[entry[0]] = entry[1]
        return out
    c = desc()
    print('created retention.ms=%s cleanup.policy=%s' % (c['retention.ms'], c['cleanup.policy']))
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={'max.message.bytes': '50000'})])
    c = desc()
    print('altered max.message.bytes=%s retention.ms=%s' % (c['max.message.bytes'], c['retention.ms']))
    resp = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={'retention.ms': 'often'})])
    code = resp.resources[0][0]
    print('bad value refused: %s' % ('INVALID_CONFIG' if code == 40 else 'code %d' % code))


{'confluent_kafka': confluent, 'kafka': kafka_python}[module]()

// kafkajs: produce keyed records, consume them in a group.
const { Kafka, logLevel } = require('kafkajs')
const [addr, topic, count] = process.argv.slice(2)
const n = Number(count)
const kafka = new Kafka({ clientId: 'interop', brokers: [addr], logLevel: logLevel.WARN })
;(async () => {
  const p = kafka.producer()
  await p.connect()
  await p.send({ topic, messages: Array.from({ length: n }, (_, i) => ({ key: String(i), value: `${topic}-${i}` })) })
  await p.disconnect()
  const c = kafka.consumer({ groupId: `${topic}-group` })
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  const keys = new Set()
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${keys.size} of ${n}`)), 30000)
    c.run({ eachMessage: async ({ message }) => {
      keys.add(message.key.toString())
      if (keys.size === n) { clearTimeout(timer); resolve() }
    } })
  })
  await c.disconnect()
  console.log('consumed', keys.size)
  process.exit(0)
})().catch(e => { console.error(e); process.exit(1) })

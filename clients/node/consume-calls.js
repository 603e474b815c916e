#!/usr/bin/env node
'use strict'
// consume-calls.js: print the calls ivrsched publishes on ivr-calls, one
// ivrsched.v1.IVRCall per line as JSON, shaped like `ivrsched calls`.

const { types, toJSON, badFlag, parseFlags, brokerList, nonNegativeInt, kafka, connect, main } = require('./ivrsched')

const USAGE = `usage: node consume-calls.js [flags]

Prints the calls on the ivr-calls topic as JSON lines (proto field names,
Timestamps as RFC 3339 strings in UTC, int64 as strings, enums by name, bytes
in base64), following new ones. A record that does not decode prints as
{"undecodable":true,"partition":P,"offset":"O"}.

  --brokers host:port[,...]  Kafka bootstrap brokers (default 127.0.0.1:9092)
  --topic NAME               calls topic, with any --topic-prefix of ivrsched
                             included (default ivr-calls)
  --from-beginning           start at the oldest call kept; default: only
                             calls produced from now on
  --limit N                  exit after N calls; 0 follows until interrupted
                             (default 0)
  --group ID                 consumer group (default: a new one per run; no
                             offsets are committed)
  --client-id ID             Kafka client id (default ivrsched-node-calls)
  --help                     this text

Exit status: 0 done, 1 Kafka error, 2 bad flags.`

const FLAGS = {
  brokers: 'string',
  topic: 'string',
  'from-beginning': 'boolean',
  limit: 'string',
  group: 'string',
  'client-id': 'string',
  help: 'boolean'
}

async function run (argv) {
  const f = parseFlags(argv, FLAGS)
  if (f.help) {
    process.stdout.write(USAGE + '\n')
    return 0
  }
  const brokers = brokerList(f.brokers === undefined ? '127.0.0.1:9092' : f.brokers)
  const topic = f.topic === undefined ? 'ivr-calls' : f.topic
  if (!topic) throw badFlag('topic', 'empty; want a topic name')
  const limit = f.limit === undefined ? 0 : nonNegativeInt('limit', f.limit)
  if (f.group === '') throw badFlag('group', 'empty; want a consumer group id or leave the flag out')
  const groupId = f.group || `ivrsched-node-calls-${process.pid}-${Date.now()}`
  const { IVRCall } = types()

  const consumer = kafka(brokers, f['client-id'] || 'ivrsched-node-calls').consumer({ groupId, allowAutoTopicCreation: false })
  let printed = 0
  let finish
  const done = new Promise(resolve => { finish = resolve })
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => finish())
  consumer.on(consumer.events.CRASH, e => { if (!e.payload.restart) finish(e.payload.error) })

  await connect(consumer, brokers)
  try {
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning: Boolean(f['from-beginning']) })
    } catch (err) {
      throw new Error(`subscribe to topic ${topic}: ${err.message}`)
    }
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (limit && printed >= limit) return
        let line
        try {
          line = JSON.stringify(toJSON(IVRCall, IVRCall.decode(message.value || Buffer.alloc(0))))
          printed++
        } catch (e) {
          line = JSON.stringify({ undecodable: true, partition, offset: message.offset })
        }
        process.stdout.write(line + '\n')
        if (limit && printed >= limit) finish()
      }
    })
    const err = await done
    if (err) throw err
  } finally {
    await consumer.disconnect()
  }
  return 0
}

if (require.main === module) main('consume-calls', run)

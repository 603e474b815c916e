#!/usr/bin/env node
'use strict'
// produce.js: onboard a user with ivrsched from Node.js. Writes one
// ivrsched.v1.Command (the onboard case) to the onboarding topic, keyed by the
// user id, with kafkajs's default partitioner, and prints where it went.

const {
  types, timestampFromISO, timestampFromMillis, durationFromMillis, E164, validZone,
  UsageError, badFlag, parseFlags, brokerList, nonNegativeInt, kafka, producerOptions, connect, main
} = require('./ivrsched')

const USAGE = `usage: node produce.js --user ID [--phone +E164] [flags]

Produces an onboarding command for ivrsched: the user gets a follow-up call
after --delay-ms (or at --at). Without either, and without --task, the
scheduler's default follow-up applies. Prints {"topic","partition","offset",
"user"} as one JSON line once the broker acknowledged the record.

  --brokers host:port[,...]  Kafka bootstrap brokers (default 127.0.0.1:9092)
  --topic NAME               onboarding topic, with any --topic-prefix of
                             ivrsched included (default onboarding)
  --user ID                  user id (required); the record key
  --phone +E164              phone number like +14155550123; required the
                             first time a user is onboarded, optional after
  --tz ZONE                  the user's IANA time zone, like Europe/Berlin
  --task ID                  task id of the follow-up (default: followup-1)
  --delay-ms N               the follow-up is due N ms after the command
  --at TIME                  the follow-up is due at TIME (RFC 3339, like
                             2026-12-01T09:30:00Z); instead of --delay-ms
  --script NAME              IVR script of the call (default welcome)
  --campaign ID              campaign id of the call
  --payload TEXT             opaque payload handed to the provider
  --client-id ID             Kafka client id (default ivrsched-node-produce)
  --help                     this text

Exit status: 0 produced, 1 Kafka error, 2 bad flags.`

const FLAGS = {
  brokers: 'string',
  topic: 'string',
  user: 'string',
  phone: 'string',
  tz: 'string',
  task: 'string',
  'delay-ms': 'string',
  at: 'string',
  script: 'string',
  campaign: 'string',
  payload: 'string',
  'client-id': 'string',
  help: 'boolean'
}

// command builds the Command from the flags, checked as the scheduler would.
function command (f, now) {
  if (!f.user) throw badFlag('user', 'required; want a user id')
  if (f.phone !== undefined && !E164.test(f.phone)) {
    throw badFlag('phone', `${JSON.stringify(f.phone)} is not E.164; want like +14155550123`)
  }
  if (f.tz !== undefined && (f.tz === '' || !validZone(f.tz))) {
    throw badFlag('tz', `${JSON.stringify(f.tz)} is not an IANA time zone; want like America/New_York`)
  }
  if (f['delay-ms'] !== undefined && f.at !== undefined) {
    throw badFlag('at', 'give --delay-ms or --at, not both')
  }
  const followUp = {}
  if (f['delay-ms'] !== undefined) {
    followUp.delay = durationFromMillis(nonNegativeInt('delay-ms', f['delay-ms']))
  } else if (f.at !== undefined) {
    const at = timestampFromISO(f.at)
    if (!at) throw badFlag('at', `${JSON.stringify(f.at)}; want an RFC 3339 time like 2026-12-01T09:30:00Z`)
    followUp.due_at = at
  }
  if (f.task === '') throw badFlag('task', 'empty; want a task id or leave the flag out')
  const wantsFollowUp = f.task !== undefined || f.script !== undefined || f.campaign !== undefined || f.payload !== undefined
  if (wantsFollowUp && !followUp.delay && !followUp.due_at) {
    throw badFlag('delay-ms', 'a follow-up with --task, --script, --campaign or --payload needs --delay-ms or --at')
  }
  const onboard = {}
  if (f.phone) onboard.phone = f.phone
  if (f.tz) onboard.time_zone = f.tz
  if (followUp.delay || followUp.due_at) {
    // Only non-default fields: proto3 leaves defaults off the wire.
    if (f.task) followUp.task_id = f.task
    followUp.action = {}
    const script = f.script === undefined ? 'welcome' : f.script
    if (script) followUp.action.ivr_script = script
    if (f.campaign) followUp.action.campaign_id = f.campaign
    if (f.payload) followUp.payload = Buffer.from(f.payload, 'utf8')
    onboard.follow_ups = [followUp]
  }
  // requested_at: the scheduler counts --delay-ms from here, so a replay of
  // this record computes the same due time.
  return { user_id: f.user, onboard, requested_at: timestampFromMillis(now) }
}

async function run (argv) {
  const f = parseFlags(argv, FLAGS)
  if (f.help) {
    process.stdout.write(USAGE + '\n')
    return 0
  }
  const brokers = brokerList(f.brokers === undefined ? '127.0.0.1:9092' : f.brokers)
  const topic = f.topic === undefined ? 'onboarding' : f.topic
  if (!topic) throw badFlag('topic', 'empty; want a topic name')
  const { Command } = types()
  const obj = command(f, Date.now())
  const problem = Command.verify(obj)
  if (problem) throw new UsageError(`command does not fit ivrsched.v1.Command: ${problem}`)
  const value = Buffer.from(Command.encode(Command.fromObject(obj)).finish())

  // kafkajs 2.x's default partitioner, the Java client's murmur2, the one
  // ivrsched uses for every topic; no auto-created topics (producerOptions).
  const producer = kafka(brokers, f['client-id'] || 'ivrsched-node-produce').producer(producerOptions)
  await connect(producer, brokers)
  try {
    let meta
    try {
      [meta] = await producer.send({ topic, acks: -1, messages: [{ key: f.user, value }] })
    } catch (err) {
      throw new Error(`produce to topic ${topic}: ${err.message}`)
    }
    process.stdout.write(JSON.stringify({ topic: meta.topicName, partition: meta.partition, offset: String(meta.baseOffset), user: f.user }) + '\n')
  } finally {
    await producer.disconnect()
  }
  return 0
}

if (require.main === module) main('produce', run)

module.exports = { command }

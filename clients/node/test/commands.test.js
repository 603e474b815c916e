'use strict'
// The commands the client builds and the messages it decodes, without Kafka.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Commands, FollowUps, Topic, encode, decode, toDate, toISO, InvalidCommandError } = require('..')

const NOW = new Date('2026-03-01T12:00:00.123Z')
const commands = new Commands({ now: () => NOW })

test('onboard carries everything and the clock\'s time', () => {
  const c = commands.onboard('u1', '+14155550123', 'Europe/Berlin',
    { ...Commands.after('welcome', 1500), action: Commands.action('welcome-ivr', 'spring') },
    Commands.at('reminder', '2026-03-08T10:30:00.000000001+01:00'))
  const back = decode('Command', encode('Command', c))
  assert.deepEqual(back, {
    user_id: 'u1',
    command: 'onboard',
    onboard: {
      phone: '+14155550123',
      time_zone: 'Europe/Berlin',
      follow_ups: [
        { task_id: 'welcome', when: 'delay', delay: { seconds: 1, nanos: 500000000 }, action: { ivr_script: 'welcome-ivr', campaign_id: 'spring' } },
        { task_id: 'reminder', when: 'due_at', due_at: { seconds: 1772962200, nanos: 1 } }
      ]
    },
    requested_at: { seconds: 1772366400, nanos: 123000000 }
  })
  assert.equal(toISO(back.onboard.follow_ups[1].due_at), '2026-03-08T09:30:00.000000001Z')
  assert.equal(toDate(back.requested_at).getTime(), NOW.getTime())
})

test('onboard without phone, zone or follow-ups keeps the user\'s', () => {
  assert.deepEqual(decode('Command', encode('Command', commands.onboard('u1'))).onboard, {})
})

test('cancel, reschedule, forget', () => {
  const wire = c => decode('Command', encode('Command', c))
  assert.deepEqual(wire(commands.cancel('u1', 'welcome')).cancel, { task_id: 'welcome' })
  assert.deepEqual(wire(commands.cancel('u1')).cancel, {})
  assert.deepEqual(wire(commands.reschedule('u1', 'welcome', new Date('2026-03-02T10:00:00.5Z'))).reschedule,
    { task_id: 'welcome', when: 'due_at', due_at: { seconds: 1772445600, nanos: 500000000 } })
  assert.deepEqual(wire(commands.reschedule('u1', 'welcome', 45 * 60 * 1000)).reschedule,
    { task_id: 'welcome', when: 'delay', delay: { seconds: 2700 } })
  const f = wire(commands.forget('u1'))
  assert.equal(f.command, 'forget')
  assert.deepEqual(f.forget, {})
  assert.equal(FollowUps.after, Commands.after)
})

test('bad arguments say what is wrong', () => {
  const bad = (want, fn) => assert.throws(fn, e => e instanceof InvalidCommandError && e.message === want, want)
  bad('user id is empty', () => commands.cancel(''))
  bad('user id "__ivrsched-tick-1" starts with "__ivrsched-", which is reserved', () => commands.forget('__ivrsched-tick-1'))
  bad('phone "4155550123" is not E.164 (like +14155550123)', () => commands.onboard('u1', '4155550123'))
  bad('time zone "Mars/Olympus" is not an IANA time zone (like Europe/Berlin)', () => commands.onboard('u1', null, 'Mars/Olympus'))
  bad('time zone "+02:00" is not an IANA time zone (like Europe/Berlin)', () => commands.onboard('u1', null, '+02:00'))
  bad('task id "a" appears twice in one command', () => commands.onboard('u1', null, null, Commands.after('a', 0), Commands.after('a', 1000)))
  bad('follow-up "a" has neither a delay nor a due time', () => commands.onboard('u1', null, null, { task_id: 'a' }))
  bad('delay -1 ms is negative', () => Commands.after('a', -1))
  bad('due time "tomorrow" is not an RFC 3339 time (like 2026-12-01T09:30:00Z)', () => Commands.at('a', 'tomorrow'))
  bad('task id is empty', () => commands.cancel('u1', ''))
  bad('task id is empty', () => commands.reschedule('u1', undefined, 0))
})

test('decode: enums by name, int64 as numbers, undecodable bytes throw', () => {
  const ev = { user_id: 'u1', task_id: 't', kind: 'KIND_TOO_LATE', call_id: 'c1', due_at: { seconds: 1772366400 } }
  assert.deepEqual(decode('ScheduleEvent', encode('ScheduleEvent', ev)), ev)
  assert.throws(() => decode('IVRCall', Buffer.from([0xff, 0x01])))
})

test('topics take ivrsched\'s prefix', () => {
  assert.equal(Topic.ONBOARDING.name, 'onboarding')
  assert.equal(Topic.CALLS.withPrefix('t1-').name, 't1-ivr-calls')
  assert.equal(Topic.EVENTS.withPrefix('t1-').withPrefix('t2-').name, 't2-followup-events')
  assert.equal(String(Topic.RESULTS), 'ivr-results')
  assert.equal(Topic.RESULTS.type, 'CallResult')
})

test('connecting without brokers says so', async () => {
  await assert.rejects(FollowUps.connect({}), { name: 'TypeError', message: 'options.brokers (["host:port", ...]) or options.kafka (a kafkajs Kafka) is required' })
  await assert.rejects(FollowUps.connect({ brokers: 'localhost' }), { message: 'options.brokers: "localhost" is not host:port[,host:port...]' })
})

test('loading the client leaves the environment alone; its producers do not warn', () => {
  assert.equal(process.env.KAFKAJS_NO_PARTITIONER_WARNING, undefined)
  const { Kafka, logLevel } = require('kafkajs')
  const { producerOptions } = require('../ivrsched')
  const logged = []
  const kafka = new Kafka({ brokers: ['127.0.0.1:1'], logLevel: logLevel.DEBUG, logCreator: () => ({ log }) => logged.push(log.message) })
  kafka.producer(producerOptions) // not connected: creating it is when kafkajs warns
  assert.deepEqual(logged.filter(m => /partitioner/i.test(m)), [])
})

test('a missing onboarding topic names the brokers and the prefix', async () => {
  const missing = Object.assign(new Error('This server does not host this topic-partition'), { type: 'UNKNOWN_TOPIC_OR_PARTITION' })
  const producer = { send: async () => { throw new Error('Number of retries exceeded', { cause: missing }) } }
  const f = FollowUps.wrap(producer, { brokers: ['b1:9092', 'b2:9092'], topicPrefix: 'nope-' })
  await assert.rejects(f.forget('u1'), {
    message: 'produce to topic nope-onboarding at brokers b1:9092,b2:9092: Number of retries exceeded' +
      ' (is ivrsched running there with --topic-prefix "nope-"? it creates the topic)'
  })
})

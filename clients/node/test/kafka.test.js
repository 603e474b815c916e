'use strict'
// The Node.js client against Kafka and a running ivrsched (see env.js):
// commands sent with FollowUps, what the scheduler and the dialer publish
// read with consume().

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { FollowUps, Topic, consume, toDate, decode } = require('..')
const { kafkaEnv, unique, Inbox } = require('./env')

let env, followUps, calls, events, results, onboarding

before(async () => {
  if (!process.env.KAFKA_BROKERS) return // each test skips (or fails under CI=true)
  env = { brokers: process.env.KAFKA_BROKERS.split(','), prefix: process.env.IVRSCHED_TOPIC_PREFIX || '' }
  followUps = await FollowUps.connect({ brokers: env.brokers, topicPrefix: env.prefix });
  [calls, events, results, onboarding] = await Promise.all([Topic.CALLS, Topic.EVENTS, Topic.RESULTS, Topic.ONBOARDING].map(t => Inbox.open(t, env)))
})

after(async () => {
  for (const c of [calls, events, results, onboarding]) if (c) await c.close()
  if (followUps) await followUps.close()
})

test('onboarded from Node.js, the follow-up fires, the dialer reports it, a cancel after it is too late', async t => {
  if (!kafkaEnv(t)) return
  const user = unique('node-onboard')
  const sent = Date.now()
  await followUps.onboard(user, '+14155550111', 'Europe/Berlin',
    { ...FollowUps.after('welcome', 1000), action: FollowUps.action('welcome-ivr', 'node') })

  const { value: call } = await calls.await(`call for ${user}`, c => c.user_id === user)
  assert.equal(call.task_id, 'welcome')
  assert.equal(call.phone, '+14155550111')
  assert.equal(call.time_zone, 'Europe/Berlin')
  assert.deepEqual(call.action, { ivr_script: 'welcome-ivr', campaign_id: 'node' })
  assert.equal(call.attempt, 1)
  const due = toDate(call.due_at)
  const fired = toDate(call.fired_at)
  assert.ok(due.getTime() >= sent + 1000, `due ${due.toISOString()} is less than 1 s after the command was sent at ${new Date(sent).toISOString()}`)
  assert.ok(fired >= due, `fired at ${fired.toISOString()}, before its due time ${due.toISOString()}`)
  t.diagnostic(`${user} fired ${fired - due} ms after its due time`)

  const { value: result } = await results.await(`result of call ${call.call_id}`, r => r.call_id === call.call_id)
  assert.equal(result.user_id, user)
  assert.notEqual(result.outcome || 'OUTCOME_UNSPECIFIED', 'OUTCOME_UNSPECIFIED')

  await followUps.cancel(user, 'welcome')
  const { value: late } = await events.await(`event for ${user}`, e => e.user_id === user)
  assert.equal(late.kind, 'KIND_TOO_LATE')
  assert.equal(late.call_id, call.call_id)
})

test('a cancel before the due time wins: no call, KIND_CANCELLED', async t => {
  if (!kafkaEnv(t)) return
  const user = unique('node-cancel')
  // The sentinel is due after the cancelled task: a user's calls come in
  // firing order on one partition, so once the sentinel's call is there the
  // cancelled one would have been there too.
  await followUps.onboard(user, '+14155550112', 'America/New_York', FollowUps.after('reminder', 3000), FollowUps.after('sentinel', 4000))
  await followUps.cancel(user, 'reminder')

  const { value: cancelled } = await events.await(`event for ${user}`, e => e.user_id === user)
  assert.equal(cancelled.kind, 'KIND_CANCELLED')
  assert.equal(cancelled.task_id, 'reminder')
  await calls.await(`sentinel call for ${user}`, c => c.user_id === user && c.task_id === 'sentinel')
  assert.deepEqual(calls.seen(c => c.user_id === user && c.task_id === 'reminder'), [], 'the cancelled follow-up fired')
})

test('a follow-up due in an hour, rescheduled to a second from now, fires then', async t => {
  if (!kafkaEnv(t)) return
  const user = unique('node-reschedule')
  await followUps.onboard(user, '+14155550113', 'Asia/Tokyo', FollowUps.after('later', 3600 * 1000))
  const sent = Date.now()
  await followUps.reschedule(user, 'later', 1000)

  const { value: moved } = await events.await(`event for ${user}`, e => e.user_id === user)
  assert.equal(moved.kind, 'KIND_RESCHEDULED')
  const { value: call } = await calls.await(`call for ${user}`, c => c.user_id === user)
  assert.equal(call.task_id, 'later')
  assert.ok(toDate(call.due_at).getTime() < sent + 60000, 'not rescheduled')
  assert.ok(toDate(call.fired_at) >= toDate(call.due_at), 'fired early')
})

test('forget() sends a Forget keyed by the user, on the user\'s partition; the scheduler erases the user', async t => {
  if (!kafkaEnv(t)) return
  const user = unique('node-forget')
  await followUps.onboard(user, '+14155550114', 'Europe/London', FollowUps.after('later', 3600 * 1000))
  const before = Date.now()
  const sent = await followUps.forget(user)
  const r = await onboarding.await(`forget of ${user}`, c => c.user_id === user && c.command === 'forget')
  assert.equal(r.key, user)
  assert.equal(r.partition, sent.partition)
  assert.equal(r.offset, sent.offset)
  assert.ok(toDate(r.value.requested_at).getTime() >= before - 1000, 'requested_at is the send time')

  const { value: forgotten } = await events.await(`event for ${user}`, e => e.user_id === user)
  assert.equal(forgotten.kind, 'KIND_FORGOTTEN')
  assert.equal(forgotten.detail, 'erased')
  // The pending follow-up went with the user.
  await followUps.cancel(user, 'later')
  const { value: unknown } = await events.await(`second event for ${user}`, e => e.user_id === user && e.kind !== 'KIND_FORGOTTEN')
  assert.equal(unknown.kind, 'KIND_UNKNOWN_TASK')
})

test('a record that does not decode comes with its error, and the loop goes on', async t => {
  if (!kafkaEnv(t)) return
  // Written to the onboarding topic, where the scheduler dead-letters it.
  const user = unique('node-undecodable')
  await followUps.producer.send({ topic: Topic.ONBOARDING.withPrefix(env.prefix).name, messages: [{ key: user, value: Buffer.from([0xff, 0x01]) }] })
  await followUps.forget(user)
  const sub = await consume(Topic.ONBOARDING.withPrefix(env.prefix), { brokers: env.brokers, groupId: unique('node-undecodable') })
  let bad = null
  try {
    for await (const r of sub) {
      if (r.key !== user) continue
      if (r.error) {
        bad = r
        continue
      }
      assert.equal(r.value.command, 'forget')
      break
    }
  } finally {
    await sub.close()
  }
  assert.ok(bad, 'the undecodable record was yielded')
  assert.equal(bad.value, undefined)
  assert.match(bad.error.message, /not an ivrsched\.v1\.Command/)
  assert.throws(() => decode('Command', Buffer.from([0xff, 0x01])))
})

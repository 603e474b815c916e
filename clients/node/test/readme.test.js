'use strict'
// The Node.js snippet of the README's "Clients" section, run as written (the
// Go test TestClientSnippetsInReadme checks that the README shows these lines).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { kafkaEnv, unique } = require('./env')

test('README snippet', { timeout: 60000 }, async t => {
  const env = kafkaEnv(t)
  if (!env) return
  const brokers = env.brokers
  const prefix = env.prefix // ivrsched's --topic-prefix, usually ''
  const user = unique('u42')

  // README: node begin
  const { FollowUps, Topic, consume, toDate } = require('ivrsched-client')

  const followUps = await FollowUps.connect({ brokers, topicPrefix: prefix })
  await followUps.onboard(user, '+14155550142', 'America/New_York', FollowUps.after('welcome', 2000))
  await followUps.close()

  const calls = await consume(Topic.CALLS.withPrefix(prefix), { brokers, groupId: 'dialer-' + user })
  let call
  for await (const { key, value } of calls) {
    if (key === user) {
      call = value
      break // leaving the loop closes the consumer
    }
  }
  console.log(`call ${call.call_id} to ${call.phone}, due ${toDate(call.due_at).toISOString()}`)
  // README: node end

  assert.equal(call.task_id, 'welcome')
  assert.equal(call.phone, '+14155550142')
})

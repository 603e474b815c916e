'use strict'
// The Node.js side of the contract check across Go, Java and Node.js
// (systemtest/clients_test.go): the same logical commands, written with each
// client's API, must decode to equal messages and land on the same
// partitions. This test sends them to the onboarding topic under the prefix
// IVRSCHED_CONTRACT_PREFIX (no scheduler reads it); the Go test compares.
// The same list is in clients/java/.../ContractTest.java and the Go test.

const { test } = require('node:test')
const { FollowUps } = require('..')
const { kafkaEnv, need } = require('./env')

// requested_at of every contract command.
const REQUESTED = new Date('2026-03-01T12:00:00.123Z')

test('send the contract commands', async t => {
  const env = kafkaEnv(t)
  if (!env) return
  const prefix = need(t, 'IVRSCHED_CONTRACT_PREFIX', 'the contract check sets it')
  if (prefix === null) return
  const f = await FollowUps.connect({ brokers: env.brokers, topicPrefix: prefix, now: () => REQUESTED })
  try {
    await Promise.all([
      f.onboard('contract-alice', '+14155550123', 'Europe/Berlin',
        { ...FollowUps.after('welcome', 90 * 1000), action: FollowUps.action('welcome-ivr', 'spring-2026') },
        { ...FollowUps.at('reminder', '2026-03-08T09:30:00.000000001Z'), payload: Buffer.from('{"lang":"de"}') }),
      f.onboard('contract-frank'),
      f.cancel('contract-bob', 'welcome'),
      f.cancel('contract-carol'),
      f.reschedule('contract-dave', 'welcome', new Date('2026-03-02T10:00:00.5Z')),
      f.reschedule('contract-erin', 'welcome', 45 * 60 * 1000),
      f.forget('contract-zoë')
    ])
  } finally {
    await f.close()
  }
})

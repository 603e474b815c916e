'use strict'
// The README's Node.js example, run as written by test/readme.test.js (the
// Go test TestClientSnippetsInReadme checks that the README shows it).
// KAFKA_BROKERS, IVRSCHED_TOPIC_PREFIX and the user id (argument) default
// to what a local ivrsched uses.

// README: node begin
const { FollowUps, Topic, consume, toDate } = require('ivrsched-client')

const brokers = (process.env.KAFKA_BROKERS || 'localhost:9092').split(',')
const prefix = process.env.IVRSCHED_TOPIC_PREFIX || '' // ivrsched's --topic-prefix
const user = process.argv[2] || 'u42'

async function main () {
  const followUps = await FollowUps.connect({ brokers, topicPrefix: prefix })
  try {
    await followUps.onboard(user, '+14155550142', 'America/New_York', FollowUps.after('welcome', 2000))
  } finally {
    await followUps.close()
  }

  const calls = await consume(Topic.CALLS.withPrefix(prefix), { brokers, groupId: 'dialer-' + user })
  const deadline = setTimeout(() => calls.close(), 60000) // ends the loop below
  let call
  for await (const { key, value } of calls) {
    if (key === user) {
      call = value
      break // leaving the loop closes the consumer
    }
  }
  clearTimeout(deadline)
  if (!call) throw new Error(`no call for ${user} within 60 s`)
  console.log(`call ${call.call_id} (${call.task_id}) to ${call.phone}, due ${toDate(call.due_at).toISOString()}`)
}

main().catch(err => {
  console.error(err)
  process.exitCode = 1
})
// README: node end

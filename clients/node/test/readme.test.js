'use strict'
// The README's Node.js example (examples/onboard.js), run as written, as a
// service's script would run: its own process, requiring 'ivrsched-client'
// by name (the package's self-reference resolves it here). The Go test
// TestClientSnippetsInReadme checks that the README shows it.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFile } = require('child_process')
const path = require('path')
const { promisify } = require('util')
const { kafkaEnv, unique } = require('./env')

test('README example', { timeout: 90000 }, async t => {
  const env = kafkaEnv(t)
  if (!env) return
  const user = unique('u42')
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, '..', 'examples', 'onboard.js'), user], {
    env: { ...process.env, KAFKA_BROKERS: env.brokers.join(','), IVRSCHED_TOPIC_PREFIX: env.prefix },
    timeout: 80000
  })
  assert.match(stdout, /^call \S+ \(welcome\) to \+14155550142, due \d{4}-\d\d-\d\dT[\d:.]+Z\n$/)
})

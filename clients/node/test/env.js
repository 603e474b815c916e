'use strict'
// Test helpers: the Kafka cluster and ivrsched the Kafka tests run against
// (KAFKA_BROKERS and IVRSCHED_TOPIC_PREFIX, set by the Go system test
// systemtest/clients_test.go; without KAFKA_BROKERS the tests are skipped,
// except under CI=true, where they fail), and an inbox of what a topic
// received, to wait on.

const crypto = require('crypto')
const { consume } = require('..')

// need returns an environment variable a test needs, or null after
// skipping the test (failing it under CI=true).
function need (t, name, why) {
  const v = process.env[name]
  if (v) return v
  const msg = `${name} is not set: ${why}`
  if (process.env.CI === 'true') throw new Error(`${msg} (CI=true: failing instead of skipping)`)
  t.skip(msg)
  return null
}

// kafkaEnv returns {brokers, prefix}, or null when the test was skipped.
function kafkaEnv (t) {
  const brokers = need(t, 'KAFKA_BROKERS', 'the Kafka tests need a cluster with ivrsched running on it (the Go system test sets it)')
  if (!brokers) return null
  return { brokers: brokers.split(','), prefix: process.env.IVRSCHED_TOPIC_PREFIX || '' }
}

function unique (base) {
  return `${base}-${crypto.randomBytes(4).toString('hex')}`
}

// Inbox collects every record of a topic, read by a new consumer group.
class Inbox {
  static async open (topic, env) {
    const sub = await consume(topic.withPrefix(env.prefix), { brokers: env.brokers, groupId: unique('ivrsched-node-test-' + topic.base) })
    return new Inbox(sub, topic.withPrefix(env.prefix).name)
  }

  constructor (sub, name) {
    this.sub = sub
    this.name = name
    this.records = []
    this.undecodable = []
    this.wake = null
    this.loop = (async () => {
      for await (const r of sub) {
        if (r.error) {
          this.undecodable.push(r) // the undecodable-record test writes some
          continue
        }
        this.records.push(r)
        if (this.wake) this.wake()
      }
    })()
    this.loop.catch(() => {}) // surfaced by close()
  }

  // await returns the first record whose value matches, waiting up to ms.
  async await (what, match, ms = 60000) {
    const deadline = Date.now() + ms
    let checked = 0
    for (;;) {
      for (; checked < this.records.length; checked++) {
        if (match(this.records[checked].value)) return this.records[checked]
      }
      const left = deadline - Date.now()
      if (left <= 0) {
        throw new Error(`no ${what} on ${this.name} within ${ms} ms (${this.records.length} other records); is ivrsched running on KAFKA_BROKERS with --topic-prefix $IVRSCHED_TOPIC_PREFIX?`)
      }
      let timer
      await new Promise(resolve => {
        this.wake = resolve
        timer = setTimeout(resolve, left)
      })
      clearTimeout(timer)
      this.wake = null
    }
  }

  seen (match) {
    return this.records.filter(r => match(r.value)).map(r => r.value)
  }

  async close () {
    await this.sub.close()
    await this.loop
  }
}

module.exports = { need, kafkaEnv, unique, Inbox }

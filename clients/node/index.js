'use strict'
// The ivrsched Node.js client: FollowUps sends commands (onboard, cancel,
// reschedule, forget) to the onboarding topic with kafkajs; Commands builds
// them for a producer of your own; consume() reads what the scheduler and
// the dialer publish as typed messages. Messages are plain objects with the
// .proto's field names; index.d.ts and generated/ivrsched.d.ts type them.

const {
  types, timestampFromISO, timestampFromMillis, isoFromTimestamp, E164, validZone, brokerList, kafka: quietKafka, producerOptions,
  connect
} = require('./ivrsched')

// User ids starting with this are the scheduler's own keys.
const RESERVED_PREFIX = '__ivrsched-'

// InvalidCommandError is an argument the scheduler would reject; its message
// says which and why. Nothing was sent.
class InvalidCommandError extends Error {
  constructor (message) {
    super(message)
    this.name = 'InvalidCommandError'
  }
}

const quote = JSON.stringify

// lean drops the zero fields of a Timestamp or Duration: protobufjs writes
// a field that is present even at its default value, Go and Java leave it
// off the wire.
function lean (t) {
  const out = {}
  if (t.seconds) out.seconds = t.seconds
  if (t.nanos) out.nanos = t.nanos
  return out
}

function timestampOf (when) {
  if (when instanceof Date) {
    if (Number.isNaN(when.getTime())) throw new InvalidCommandError('due time is an invalid Date')
    return lean(timestampFromMillis(when.getTime()))
  }
  if (typeof when === 'string') {
    const ts = timestampFromISO(when)
    if (!ts) throw new InvalidCommandError(`due time ${quote(when)} is not an RFC 3339 time (like 2026-12-01T09:30:00Z)`)
    return lean(ts)
  }
  throw new InvalidCommandError(`due time ${quote(when)}: want a Date or an RFC 3339 string`)
}

function durationOf (ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new InvalidCommandError(`delay ${quote(ms)}: want milliseconds as a number`)
  if (ms < 0) throw new InvalidCommandError(`delay ${ms} ms is negative`)
  const seconds = Math.floor(ms / 1000)
  return lean({ seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) })
}

function requireTask (task) {
  if (typeof task !== 'string' || task === '') throw new InvalidCommandError('task id is empty')
  return task
}

// Commands builds the scheduler's commands, checked as the scheduler checks
// them. Each carries requested_at from now() (a Date or milliseconds;
// default: the system clock):
// the scheduler counts relative delays from it, so a replay of the record
// computes the same due time.
class Commands {
  constructor ({ now = () => new Date() } = {}) {
    this.now = now
  }

  // onboard registers (or updates) the user and schedules the follow-ups
  // (built with Commands.after or Commands.at), upserted by task id. An
  // empty phone or zone keeps the user's; without follow-ups the scheduler
  // applies its default follow-up.
  onboard (user, phone, timeZone, ...followUps) {
    const onboard = {}
    if (phone) {
      if (!E164.test(phone)) throw new InvalidCommandError(`phone ${quote(phone)} is not E.164 (like +14155550123)`)
      onboard.phone = phone
    }
    if (timeZone) {
      if (!validZone(timeZone)) throw new InvalidCommandError(`time zone ${quote(timeZone)} is not an IANA time zone (like Europe/Berlin)`)
      onboard.time_zone = timeZone
    }
    const tasks = new Set()
    for (const f of followUps) {
      if (f.task_id) {
        if (tasks.has(f.task_id)) throw new InvalidCommandError(`task id ${quote(f.task_id)} appears twice in one command`)
        tasks.add(f.task_id)
      }
      if (!f.delay && !f.due_at) throw new InvalidCommandError(`follow-up ${quote(f.task_id || '')} has neither a delay nor a due time`)
    }
    if (followUps.length) onboard.follow_ups = followUps
    return this._command(user, { onboard })
  }

  // cancel cancels one follow-up, or all of the user's without a task.
  cancel (user, task) {
    return this._command(user, { cancel: task === undefined ? {} : { task_id: requireTask(task) } })
  }

  // reschedule moves a pending follow-up: to a due time (a Date or an RFC
  // 3339 string), or to a delay in milliseconds after now.
  reschedule (user, task, when) {
    const r = { task_id: requireTask(task) }
    if (typeof when === 'number') r.delay = durationOf(when)
    else r.due_at = timestampOf(when)
    return this._command(user, { reschedule: r })
  }

  // forget erases the user (KIND_FORGOTTEN on followup-events).
  forget (user) {
    return this._command(user, { forget: {} })
  }

  _command (user, body) {
    if (typeof user !== 'string' || user === '') throw new InvalidCommandError('user id is empty')
    if (user.startsWith(RESERVED_PREFIX)) {
      throw new InvalidCommandError(`user id ${quote(user)} starts with ${quote(RESERVED_PREFIX)}, which is reserved`)
    }
    return { user_id: user, ...body, requested_at: lean(timestampFromMillis(Number(this.now()))) }
  }

  // after is a follow-up due delayMs after the onboarding's requested_at.
  // Add an action or payload by spreading: {...Commands.after('welcome', 60000), action: ...}.
  static after (task, delayMs) {
    return { task_id: task, delay: durationOf(delayMs) }
  }

  // at is a follow-up due at a time (a Date or an RFC 3339 string, whose
  // nanoseconds are kept); a past due time fires at once.
  static at (task, due) {
    return { task_id: task, due_at: timestampOf(due) }
  }

  // action is what the call does: its IVR script and campaign.
  static action (ivrScript, campaignId) {
    const a = { ivr_script: ivrScript }
    if (campaignId) a.campaign_id = campaignId
    return a
  }
}

// Topic is one of ivrsched's topics with the message type of its values.
// With ivrsched's --topic-prefix P, use Topic.CALLS.withPrefix(P).
class Topic {
  constructor (base, type, prefix = '') {
    this.base = base
    this.type = type
    this.prefix = prefix
    Object.freeze(this)
  }

  get name () {
    return this.prefix + this.base
  }

  withPrefix (prefix) {
    return new Topic(this.base, this.type, prefix)
  }

  toString () {
    return this.name
  }
}
Topic.ONBOARDING = new Topic('onboarding', 'Command')
Topic.CALLS = new Topic('ivr-calls', 'IVRCall')
Topic.RESULTS = new Topic('ivr-results', 'CallResult')
Topic.EVENTS = new Topic('followup-events', 'ScheduleEvent')

// encode writes a message (a plain object with proto field names) of the
// named ivrsched.v1 type in its binary form.
function encode (type, message) {
  const T = types()[type]
  let m
  try {
    m = T.fromObject(message) // takes enums by name, int64 as numbers or strings
  } catch (err) {
    throw new InvalidCommandError(`not an ivrsched.v1.${type}: ${err.message}`)
  }
  const problem = T.verify(m)
  if (problem) throw new InvalidCommandError(`not an ivrsched.v1.${type}: ${problem}`)
  return Buffer.from(T.encode(m).finish())
}

// decode reads a message of the named ivrsched.v1 type: proto field names,
// int64 as numbers, enums by name, bytes as Buffers, each oneof's case
// name under the oneof's name; fields at their default value are left out.
function decode (type, bytes) {
  const T = types()[type]
  return T.toObject(T.decode(bytes), { longs: Number, enums: String, oneofs: true })
}

// toDate converts a decoded Timestamp to a Date (milliseconds; toISO keeps
// the nanoseconds).
function toDate (ts) {
  return new Date(Number(ts.seconds || 0) * 1000 + Math.floor((ts.nanos || 0) / 1e6))
}

// kafkaOf returns options.kafka, or a kafkajs client of options.brokers
// ('host:port,...' or ['host:port', ...]) that logs errors only, to stderr.
function kafkaOf ({ kafka, brokers, clientId }) {
  if (kafka) return kafka
  const list = Array.isArray(brokers) ? brokers.join(',') : brokers
  if (!list) throw new TypeError('options.brokers (["host:port", ...]) or options.kafka (a kafkajs Kafka) is required')
  try {
    return quietKafka(brokerList(list), clientId)
  } catch (err) {
    throw new TypeError(`options.brokers: ${quote(list)} is not host:port[,host:port...]`)
  }
}

// unknownTopic reports whether a kafkajs error, or one of its causes, is
// UNKNOWN_TOPIC_OR_PARTITION.
function unknownTopic (err) {
  for (let e = err; e; e = e.cause) {
    if (e.type === 'UNKNOWN_TOPIC_OR_PARTITION') return true
  }
  return false
}

// FollowUps sends commands to ivrsched, one record each on the onboarding
// topic, keyed by the user id and placed by kafkajs's default partitioner
// (the Java client's murmur2), which is where the scheduler keeps the
// user's state; a user's commands apply in the order they were sent. Each
// method resolves to {topic, partition, offset} once the broker acknowledged
// the record (all in-sync replicas), and rejects with an InvalidCommandError
// for an argument the scheduler would reject (nothing is sent) or with
// kafkajs's error. Calls may overlap.
class FollowUps {
  constructor (producer, { topicPrefix = '', now, owned = false, brokers } = {}) {
    this.producer = producer
    this.prefix = topicPrefix
    this.brokers = brokers ? [].concat(brokers).join(',') : null
    this.topic = Topic.ONBOARDING.withPrefix(topicPrefix).name
    this.commands = new Commands(now ? { now } : {})
    this.owned = owned
  }

  // connect makes a client with its own producer. Options: brokers
  // (['host:port'] or 'host:port,...') or kafka (a kafkajs Kafka), topicPrefix
  // (ivrsched's --topic-prefix), clientId, now (a clock returning a Date).
  static async connect (options = {}) {
    const producer = kafkaOf({ clientId: 'ivrsched-node', ...options }).producer(producerOptions)
    await connect(producer, [].concat(options.brokers || 'the given kafka'))
    return new FollowUps(producer, { ...options, owned: true })
  }

  // wrap uses a kafkajs producer you connected yourself; keep its default
  // partitioner (createPartitioner: Partitioners.DefaultPartitioner names it
  // and keeps kafkajs from warning about it). close() leaves it connected.
  static wrap (producer, options = {}) {
    return new FollowUps(producer, { ...options, owned: false })
  }

  async onboard (user, phone, timeZone, ...followUps) {
    return this.send(this.commands.onboard(user, phone, timeZone, ...followUps))
  }

  async cancel (user, task) {
    return this.send(this.commands.cancel(user, task))
  }

  async reschedule (user, task, when) {
    return this.send(this.commands.reschedule(user, task, when))
  }

  async forget (user) {
    return this.send(this.commands.forget(user))
  }

  // send sends a command built elsewhere, keyed by its user_id.
  async send (command) {
    if (!command || !command.user_id) throw new InvalidCommandError('command has no user_id')
    const value = encode('Command', command)
    let meta
    try {
      [meta] = await this.producer.send({ topic: this.topic, acks: -1, messages: [{ key: command.user_id, value }] })
    } catch (err) {
      const at = this.brokers ? ` at brokers ${this.brokers}` : ''
      // ivrsched creates its topics: a missing one means no ivrsched there, or another prefix.
      const hint = unknownTopic(err)
        ? ` (is ivrsched running there with --topic-prefix ${quote(this.prefix)}? it creates the topic)`
        : ''
      throw new Error(`produce to topic ${this.topic}${at}: ${err.message}${hint}`, { cause: err })
    }
    return { topic: meta.topicName, partition: meta.partition, offset: meta.baseOffset }
  }

  async close () {
    if (this.owned) await this.producer.disconnect()
  }
}
FollowUps.after = Commands.after
FollowUps.at = Commands.at
FollowUps.action = Commands.action

// Subscription yields the records of one topic, decoded, as an async
// iterator: for await (const { key, value } of sub) { ... }. A record's
// offset is committed (kafkajs's autocommit) once the loop has handled it:
// when the loop asks for the next record, or leaves after it; a crash
// re-delivers what was being handled. A record that does not decode comes
// with error set and no value. Leaving the loop, or close(), ends it. One
// loop per subscription.
class Subscription {
  constructor (consumer, topic) {
    this.consumer = consumer
    this.topic = topic
    this.offered = null // {record, done} kafkajs handed over, not yet yielded
    this.waiting = null // {resolve, reject} of a next() waiting for a record
    this.done = null // done(handled) lets kafkajs go on past the record last yielded
    this.error = null
    this.closed = false
  }

  async _start (fromBeginning) {
    this.consumer.on(this.consumer.events.CRASH, e => {
      if (!e.payload.restart) this._end(e.payload.error)
    })
    await this.consumer.subscribe({ topics: [this.topic.name], fromBeginning })
    await this.consumer.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        for (const message of batch.messages) {
          if (!isRunning() || isStale() || this.closed) return
          const record = this._record(batch, message)
          // Resolved true once the loop handled the record; false if the
          // subscription ended before the loop took it (not committed).
          const handled = await new Promise(resolve => this._offer(record, resolve))
          if (!handled) return
          resolveOffset(message.offset)
          await heartbeat()
        }
      }
    })
  }

  _record (batch, message) {
    const record = {
      topic: batch.topic,
      partition: batch.partition,
      offset: message.offset,
      key: message.key ? message.key.toString() : null,
      timestamp: message.timestamp
    }
    try {
      record.value = decode(this.topic.type, message.value || Buffer.alloc(0))
    } catch (err) {
      record.error = new Error(`${batch.topic}/${batch.partition}@${message.offset}: not an ivrsched.v1.${this.topic.type}: ${err.message}`)
    }
    return record
  }

  _offer (record, done) {
    if (this.closed) return done(false)
    if (this.waiting) {
      const w = this.waiting
      this.waiting = null
      this.done = done
      w.resolve({ value: record, done: false })
    } else {
      this.offered = { record, done }
    }
  }

  _handled () {
    if (this.done) this.done(true)
    this.done = null
  }

  _end (err) {
    if (this.closed) return
    this.closed = true
    this.error = err || null
    this._handled() // the loop left after the record it last took
    if (this.offered) this.offered.done(false)
    this.offered = null
    if (this.waiting) {
      if (err) this.waiting.reject(err)
      else this.waiting.resolve({ value: undefined, done: true })
    }
    this.waiting = null
  }

  next () {
    this._handled()
    if (this.offered) {
      const { record, done } = this.offered
      this.offered = null
      this.done = done
      return Promise.resolve({ value: record, done: false })
    }
    if (this.closed) return this.error ? Promise.reject(this.error) : Promise.resolve({ value: undefined, done: true })
    if (this.waiting) return Promise.reject(new Error('Subscription: next() while another next() waits; one loop per subscription'))
    return new Promise((resolve, reject) => { this.waiting = { resolve, reject } })
  }

  async return () {
    await this.close()
    return { value: undefined, done: true }
  }

  [Symbol.asyncIterator] () {
    return this
  }

  // close stops the consumer, committing what the loop handled.
  async close () {
    this._end()
    await this.consumer.disconnect()
  }
}

// consume subscribes to one of ivrsched's topics (Topic.CALLS, RESULTS,
// EVENTS, ONBOARDING, withPrefix as needed). Options: brokers or kafka,
// groupId (required), fromBeginning (default true: a new group reads what
// is there), clientId.
async function consume (topic, options = {}) {
  if (!(topic instanceof Topic)) throw new TypeError('consume: want a Topic, like Topic.CALLS')
  if (!options.groupId) throw new TypeError('consume: options.groupId is required')
  const consumer = kafkaOf({ clientId: 'ivrsched-node', ...options }).consumer({ groupId: options.groupId, allowAutoTopicCreation: false })
  await connect(consumer, [].concat(options.brokers || 'the given kafka'))
  const sub = new Subscription(consumer, topic)
  try {
    await sub._start(options.fromBeginning !== false)
  } catch (err) {
    await sub.close()
    throw new Error(`subscribe to topic ${topic.name}: ${err.message}`, { cause: err })
  }
  return sub
}

module.exports = {
  FollowUps,
  Commands,
  Topic,
  Subscription,
  consume,
  encode,
  decode,
  toDate,
  toISO: isoFromTimestamp,
  InvalidCommandError,
  RESERVED_PREFIX
}

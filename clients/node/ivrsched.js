'use strict'
// Shared helpers of the ivrsched Node.js client: the wire contract (generated
// from codec/ivrsched.proto), Timestamp and Duration conversions, the
// JSON rendering of decoded messages, command-line flags and a quiet kafkajs.

const fs = require('fs')
const path = require('path')
const protobuf = require('protobufjs')
const { Kafka, Partitioners, logLevel } = require('kafkajs')

// The message definitions, generated from codec/ivrsched.proto by
// scripts/generate.js (npm ci and npm test run it).
const DEFINITIONS = path.join(__dirname, 'generated', 'ivrsched.json')

let root
// types returns the message types of ivrsched.v1, with proto field names
// (user_id, not userId).
function types () {
  if (!root) {
    let json
    try {
      json = JSON.parse(fs.readFileSync(DEFINITIONS, 'utf8'))
    } catch (err) {
      throw new Error(`${DEFINITIONS}: ${err.message} (npm run generate writes it from codec/ivrsched.proto; npm ci runs it)`)
    }
    root = protobuf.Root.fromJSON(json)
    root.resolveAll()
  }
  const t = name => root.lookupType('ivrsched.v1.' + name)
  return { Command: t('Command'), IVRCall: t('IVRCall'), CallResult: t('CallResult'), ScheduleEvent: t('ScheduleEvent') }
}

// E164 is a phone number as the scheduler accepts it: +, then 2 to 15 digits.
const E164 = /^\+[1-9][0-9]{1,14}$/

// validZone reports whether tz is an IANA time zone (by the platform's
// database, which Node.js and the scheduler's Go take from IANA). Offsets
// like +02:00, which newer Node.js versions take as zones, are not.
function validZone (tz) {
  if (typeof tz !== 'string' || /^[+-]/.test(tz)) return false
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz }) // eslint-disable-line no-new
    return true
  } catch (e) {
    return false
  }
}

// A Timestamp is seconds since the Unix epoch (int64) plus nanos (0..999999999).
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$/

// timestampFromISO parses an RFC 3339 time (like 2026-12-01T09:30:00Z or
// 2026-12-01T10:30:00.123456789+01:00) into a Timestamp, keeping every
// digit of the fraction (a Date would keep milliseconds only). null if invalid.
function timestampFromISO (s) {
  const m = RFC3339.exec(s)
  if (!m) return null
  const [, y, mo, d, h, mi, sec, frac = '', zone] = m
  const days = new Date(Date.UTC(Number(y), Number(mo), 0)).getUTCDate()
  if (mo < 1 || mo > 12 || d < 1 || d > days || h > 23 || mi > 59 || sec > 59) return null
  const ms = Date.parse(`${y}-${mo}-${d}T${h}:${mi}:${sec}${zone.toUpperCase()}`)
  if (Number.isNaN(ms)) return null
  return { seconds: ms / 1000, nanos: Number(frac.padEnd(9, '0')) }
}

// timestampFromMillis converts milliseconds since the epoch (Date.now()).
function timestampFromMillis (ms) {
  const seconds = Math.floor(ms / 1000)
  return { seconds, nanos: (ms - seconds * 1000) * 1e6 }
}

// fraction renders nanos with 0, 3, 6 or 9 digits, as protojson does.
function fraction (nanos) {
  if (!nanos) return ''
  let f = String(nanos).padStart(9, '0')
  if (nanos % 1e6 === 0) f = f.slice(0, 3)
  else if (nanos % 1e3 === 0) f = f.slice(0, 6)
  return '.' + f
}

// isoFromTimestamp renders a Timestamp (seconds as number, string or Long)
// in UTC with its full precision, like protojson: 2026-12-01T09:30:00.123456789Z.
function isoFromTimestamp (ts) {
  const seconds = Number(String(ts.seconds || 0))
  const nanos = Number(ts.nanos || 0)
  return new Date(seconds * 1000).toISOString().slice(0, 19) + fraction(nanos) + 'Z'
}

// durationFromMillis converts a non-negative count of milliseconds.
function durationFromMillis (ms) {
  const seconds = Math.floor(ms / 1000)
  return { seconds, nanos: (ms - seconds * 1000) * 1e6 }
}

// durationString renders a Duration like protojson: "90s", "1.500s".
function durationString (d) {
  const seconds = Number(String(d.seconds || 0))
  const nanos = Number(d.nanos || 0)
  const neg = seconds < 0 || nanos < 0
  return (neg ? '-' : '') + Math.abs(seconds) + fraction(Math.abs(nanos)) + 's'
}

const WELL_KNOWN = {
  '.google.protobuf.Timestamp': isoFromTimestamp,
  '.google.protobuf.Duration': durationString
}

// toJSON renders a decoded message as a plain object shaped like ivrsched's
// own JSON (protojson with proto field names): fields at their default value
// left out, int64 as strings, enums by name, bytes in base64, Timestamps as
// RFC 3339 strings in UTC and Durations as "1.5s".
function toJSON (type, message) {
  const obj = type.toObject(message, { longs: String, enums: String, bytes: String, json: true })
  return wellKnown(type, obj)
}

function wellKnown (type, obj) {
  for (const f of type.fieldsArray) {
    const v = obj[f.name]
    if (v === undefined || v === null || !(f.resolvedType instanceof protobuf.Type)) continue
    const rt = f.resolvedType
    const conv = WELL_KNOWN[rt.fullName] || (x => wellKnown(rt, x))
    if (f.map) obj[f.name] = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, conv(x)]))
    else if (f.repeated) obj[f.name] = v.map(conv)
    else obj[f.name] = conv(v)
  }
  return obj
}

// UsageError is a bad command line: the CLI prints its one-line message and
// exits with status 2.
class UsageError extends Error {}

function badFlag (name, why) {
  return new UsageError(`flag --${name}: ${why}`)
}

// parseFlags reads --name value, --name=value and boolean --name flags.
// spec maps each flag name to 'string' or 'boolean'.
function parseFlags (argv, spec) {
  const out = {}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (!arg.startsWith('--') || arg === '--') {
      throw new UsageError(`unexpected argument ${JSON.stringify(arg)}; flags look like --name value`)
    }
    const eq = arg.indexOf('=')
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq)
    const kind = spec[name]
    if (!kind) throw new UsageError(`unknown flag --${name}; see --help`)
    if (kind === 'boolean') {
      if (eq >= 0) {
        const v = arg.slice(eq + 1)
        if (v !== 'true' && v !== 'false') throw badFlag(name, `${JSON.stringify(v)}; want true or false`)
        out[name] = v === 'true'
      } else {
        out[name] = true
      }
      continue
    }
    let value
    if (eq >= 0) {
      value = arg.slice(eq + 1)
    } else {
      if (i + 1 >= argv.length) throw badFlag(name, 'needs a value')
      value = argv[++i]
    }
    out[name] = value
  }
  return out
}

// brokerList checks host:port[,host:port...].
function brokerList (s) {
  const list = String(s).split(',').map(b => b.trim()).filter(Boolean)
  if (list.length === 0) throw badFlag('brokers', 'empty; want host:port[,host:port...]')
  for (const b of list) {
    const m = /^(.+):(\d+)$/.exec(b)
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) {
      throw badFlag('brokers', `${JSON.stringify(b)} is not host:port`)
    }
  }
  return list
}

// nonNegativeInt parses a flag that must be an integer >= 0.
function nonNegativeInt (name, s) {
  if (!/^\d+$/.test(s) || !Number.isSafeInteger(Number(s))) {
    throw badFlag(name, `${JSON.stringify(s)}; want an integer >= 0`)
  }
  return Number(s)
}

// kafka returns a kafkajs client that logs errors only, to stderr, each
// distinct message once (kafkajs repeats them on every retry), so stdout
// carries nothing but the CLI's JSON.
function kafka (brokers, clientId) {
  const seen = new Set()
  return new Kafka({
    clientId,
    brokers,
    logLevel: logLevel.ERROR,
    logCreator: () => ({ namespace, log }) => {
      const line = `kafkajs ${namespace}: ${log.message}`
      if (seen.has(line)) return
      seen.add(line)
      process.stderr.write(line + '\n')
    }
  })
}

// producerOptions are the options of every producer the client makes. The
// partitioner is kafkajs 2.x's default, the Java client's murmur2, which is
// ivrsched's: named here so that kafkajs does not warn, when it creates the
// producer, that its default changed in 2.0 (the warning's own remedy, the
// KAFKAJS_NO_PARTITIONER_WARNING variable, would hold for the whole process).
// Topics are created by ivrsched itself, with the right partition count:
// a producer never auto-creates one.
const producerOptions = Object.freeze({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false })

// connect connects a kafkajs producer or consumer, naming the brokers in
// the error when none answers.
async function connect (client, brokers) {
  try {
    await client.connect()
  } catch (err) {
    throw new Error(`brokers ${brokers.join(',')}: ${err.message}`)
  }
}

// main runs an async CLI body: a UsageError exits 2 with its message, any
// other error exits 1.
function main (name, body) {
  body(process.argv.slice(2)).then(code => {
    process.exitCode = code || 0
  }, err => {
    if (err instanceof UsageError) {
      process.stderr.write(`${name}: ${err.message}\n`)
      process.exitCode = 2
      return
    }
    process.stderr.write(`${name}: ${err && err.message ? err.message : err}\n`)
    process.exitCode = 1
  })
}

module.exports = {
  types,
  E164,
  validZone,
  timestampFromISO,
  timestampFromMillis,
  isoFromTimestamp,
  durationFromMillis,
  durationString,
  toJSON,
  UsageError,
  badFlag,
  parseFlags,
  brokerList,
  nonNegativeInt,
  kafka,
  producerOptions,
  connect,
  main
}

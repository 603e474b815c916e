// Type-checked by package.test.js against the packed package, as a
// TypeScript service would use it. Never run.
import {
  Command, Commands, FollowUps, IVRCall, InvalidCommandError, ScheduleEvent, Sent, Topic,
  consume, decode, encode, toDate, toISO
} from 'ivrsched-client'

export async function service (): Promise<void> {
  const followUps = await FollowUps.connect({ brokers: ['localhost:9092'], topicPrefix: '' })
  const sent: Sent = await followUps.onboard('u1', '+14155550123', 'Europe/Berlin',
    { ...FollowUps.after('welcome', 1000), action: FollowUps.action('welcome-ivr') },
    { ...Commands.at('reminder', new Date()), payload: new Uint8Array([1]) })
  const partition: number = sent.partition
  await followUps.cancel('u1', 'welcome')
  await followUps.cancel('u1')
  await followUps.reschedule('u1', 'reminder', '2027-01-01T09:00:00Z')
  await followUps.reschedule('u1', 'reminder', 60000)
  await followUps.forget('u1')
  await followUps.close()

  const events = await consume(Topic.EVENTS.withPrefix(''), { brokers: 'localhost:9092', groupId: 'g' })
  for await (const r of events) {
    if (r.error) {
      const e: Error = r.error
      throw e
    }
    const event: ScheduleEvent = r.value
    const kind: ScheduleEvent.Kind | undefined = event.kind
    if (kind === 'KIND_FORGOTTEN' || partition < 0) break
  }
  const calls = await consume(Topic.CALLS, { brokers: 'localhost:9092', groupId: 'g' })
  for await (const { key, value } of calls) {
    if (value && key) {
      const call: IVRCall = value
      console.log(toDate(call.due_at ?? {}).toISOString(), toISO(call.fired_at ?? {}), call.action?.ivr_script)
    }
  }

  const cmd: Command = new Commands({ now: () => Date.now() }).forget('u1')
  const back = decode('Command', encode('Command', cmd))
  if (back.command === 'forget' && back.requested_at?.seconds) console.log('forget')
  try {
    new Commands().cancel('')
  } catch (e) {
    if (e instanceof InvalidCommandError) console.log(e.message)
  }
}

// The declarations are not too loose:
// @ts-expect-error an enum value is one of its names
export const badKind: ScheduleEvent = { kind: 'KIND_NOPE' }
// @ts-expect-error seconds is a number
export const badTime: Command = { requested_at: { seconds: true } }
export async function wrongType (): Promise<void> {
  const calls = await consume(Topic.CALLS, { groupId: 'g' })
  for await (const r of calls) {
    // @ts-expect-error the calls topic carries IVRCall, which has no kind
    console.log(r.value?.kind)
  }
  // @ts-expect-error a oneof case is one of its fields
  if (decode('Command', new Uint8Array()).command === 'delete') console.log('never')
}

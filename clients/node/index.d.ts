// Type declarations of the ivrsched Node.js client (index.js). The message
// types come from generated/ivrsched.d.ts, generated from
// codec/ivrsched.proto by scripts/generate.js.

import type { Kafka, Producer } from 'kafkajs'
import type {
  Action, CallResult, Command, FollowUp, IVRCall, ScheduleEvent
} from './generated/ivrsched'

export * from './generated/ivrsched'

/** User ids starting with this are the scheduler's own keys. */
export declare const RESERVED_PREFIX: '__ivrsched-'

/** An argument the scheduler would reject; the message says which. Nothing was sent. */
export declare class InvalidCommandError extends Error {
  name: 'InvalidCommandError'
}

/** A due time: a Date, or an RFC 3339 string (its nanoseconds are kept). */
export type DueTime = Date | string

/** Where a command went, once the broker acknowledged it. */
export interface Sent {
  topic: string
  partition: number
  offset: string
}

/** A clock: the time requested_at is stamped with. */
export type Clock = () => Date | number

/**
 * Builds the scheduler's commands, checked as the scheduler checks them
 * (an InvalidCommandError otherwise). Each carries requested_at from `now`.
 */
export declare class Commands {
  constructor (options?: { now?: Clock })
  /**
   * Registers (or updates) the user and schedules the follow-ups, upserted
   * by task id. An empty phone or zone keeps the user's; without follow-ups
   * the scheduler applies its default follow-up.
   */
  onboard (user: string, phone: string | undefined | null, timeZone: string | undefined | null, ...followUps: FollowUp[]): Command
  /** Cancels one follow-up, or all of the user's without a task. */
  cancel (user: string, task?: string): Command
  /** Moves a pending follow-up to a due time, or to a delay in milliseconds after now. */
  reschedule (user: string, task: string, when: DueTime | number): Command
  /** Erases the user (KIND_FORGOTTEN on followup-events). */
  forget (user: string): Command
  /** A follow-up due `delayMs` after the onboarding. */
  static after (task: string, delayMs: number): FollowUp
  /** A follow-up due at a time; a past one fires at once. */
  static at (task: string, due: DueTime): FollowUp
  /** What the call does. */
  static action (ivrScript: string, campaignId?: string): Action
}

/** The message type of each topic's values. */
export interface TopicTypes {
  Command: Command
  IVRCall: IVRCall
  CallResult: CallResult
  ScheduleEvent: ScheduleEvent
}

/** One of ivrsched's topics with the type of its values. */
export declare class Topic<T extends keyof TopicTypes = keyof TopicTypes> {
  private constructor ()
  readonly base: string
  readonly type: T
  readonly prefix: string
  /** The name, prefix included. */
  readonly name: string
  /** This topic under ivrsched's --topic-prefix. */
  withPrefix (prefix: string): Topic<T>
  static readonly ONBOARDING: Topic<'Command'>
  static readonly CALLS: Topic<'IVRCall'>
  static readonly RESULTS: Topic<'CallResult'>
  static readonly EVENTS: Topic<'ScheduleEvent'>
}

/** How to reach Kafka: brokers, or a kafkajs Kafka of your own. */
export interface KafkaOptions {
  brokers?: string | string[]
  kafka?: Kafka
  clientId?: string
}

/**
 * Sends commands to ivrsched, keyed by user id with kafkajs's default
 * (murmur2) partitioner. Each method resolves once the broker acknowledged
 * the record and rejects with an InvalidCommandError for an argument the
 * scheduler would reject.
 */
export declare class FollowUps {
  static connect (options: KafkaOptions & { topicPrefix?: string, now?: Clock }): Promise<FollowUps>
  /**
   * Uses a connected kafkajs producer (default partitioner); close() leaves it
   * connected. brokers, if given, only names the cluster in errors.
   */
  static wrap (producer: Producer, options?: { topicPrefix?: string, now?: Clock, brokers?: string | string[] }): FollowUps
  onboard (user: string, phone: string | undefined | null, timeZone: string | undefined | null, ...followUps: FollowUp[]): Promise<Sent>
  cancel (user: string, task?: string): Promise<Sent>
  reschedule (user: string, task: string, when: DueTime | number): Promise<Sent>
  forget (user: string): Promise<Sent>
  send (command: Command): Promise<Sent>
  close (): Promise<void>
  static after: typeof Commands.after
  static at: typeof Commands.at
  static action: typeof Commands.action
}

/** A record of one of ivrsched's topics: its value decoded, or the error if it does not decode. */
export type Received<T> = {
  topic: string
  partition: number
  offset: string
  key: string | null
  timestamp: string
} & ({ value: T, error?: undefined } | { value?: undefined, error: Error })

/** The records of a topic as an async iterator; committed once the loop handled them. */
export declare class Subscription<T> implements AsyncIterableIterator<Received<T>> {
  private constructor ()
  next (): Promise<IteratorResult<Received<T>, undefined>>
  return (): Promise<IteratorResult<Received<T>, undefined>>
  [Symbol.asyncIterator] (): Subscription<T>
  /** Stops the consumer, committing what the loop handled. */
  close (): Promise<void>
}

/** Subscribes to one of ivrsched's topics; a new group reads from the beginning unless fromBeginning is false. */
export declare function consume<K extends keyof TopicTypes> (
  topic: Topic<K>,
  options: KafkaOptions & { groupId: string, fromBeginning?: boolean }
): Promise<Subscription<TopicTypes[K]>>

/** Writes a message of the named type in its binary form. */
export declare function encode<K extends keyof TopicTypes> (type: K, message: TopicTypes[K]): Buffer
/** Reads a message of the named type. */
export declare function decode<K extends keyof TopicTypes> (type: K, bytes: Uint8Array): TopicTypes[K]

/** A Timestamp as a Date (milliseconds). */
export declare function toDate (ts: { seconds?: number, nanos?: number }): Date
/** A Timestamp in RFC 3339, UTC, with its full precision. */
export declare function toISO (ts: { seconds?: number | string, nanos?: number }): string

package com.github.ivrsched.client;

import com.github.ivrsched.v1.Action;
import com.github.ivrsched.v1.Cancel;
import com.github.ivrsched.v1.Command;
import com.github.ivrsched.v1.FollowUp;
import com.github.ivrsched.v1.Forget;
import com.github.ivrsched.v1.Onboard;
import com.github.ivrsched.v1.Reschedule;
import com.google.protobuf.Timestamp;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.util.HashSet;
import java.util.Objects;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Builds the scheduler's commands ({@link Command} messages), checked as the
 * scheduler checks them, without sending anything. {@link FollowUps} sends
 * them; a service that has its own producer (Spring's {@code KafkaTemplate},
 * say) builds them here and sends each keyed by {@link Command#getUserId()}.
 *
 * <p>Every command carries {@code requested_at}, the time of this builder's
 * clock: the scheduler counts relative delays from it, so a replay of the
 * record computes the same due time.
 *
 * <p>Instances are immutable and safe to share between threads.
 */
public final class Commands {
  /** User ids starting with this prefix are the scheduler's own keys. */
  public static final String RESERVED_PREFIX = "__ivrsched-";

  private static final Pattern E164 = Pattern.compile("^\\+[1-9][0-9]{1,14}$");

  private final Clock clock;

  /**
   * Returns a builder whose commands carry the time of {@code clock}.
   *
   * @param clock where {@code requested_at} comes from
   */
  public Commands(Clock clock) {
    this.clock = Objects.requireNonNull(clock, "clock");
  }

  /**
   * Returns a builder on the system clock (UTC).
   *
   * @return a builder stamping commands with the current time
   */
  public static Commands systemClock() {
    return new Commands(Clock.systemUTC());
  }

  /**
   * An Onboard command: registers the user (or updates the phone and zone)
   * and schedules the follow-ups, upserted by task id. Without follow-ups
   * the scheduler applies its default follow-up.
   *
   * @param user the user id, also the record key
   * @param phone the number to call, E.164 ({@code +14155550123}); null or
   *     empty keeps the phone the scheduler already has for the user (the
   *     first onboarding of a user needs one)
   * @param timeZone an IANA time zone ({@code Europe/Berlin}); null or empty
   *     keeps the user's zone (UTC for a new user)
   * @param followUps what to do when, built with {@link #after} or {@link #at}
   * @return the command
   * @throws IllegalArgumentException if an argument is invalid (the message
   *     says which)
   */
  public Command onboard(String user, String phone, String timeZone, FollowUp... followUps) {
    Onboard.Builder ob = Onboard.newBuilder();
    if (phone != null && !phone.isEmpty()) {
      if (!E164.matcher(phone).matches()) {
        throw new IllegalArgumentException("phone " + quote(phone) + " is not E.164 (like +14155550123)");
      }
      ob.setPhone(phone);
    }
    if (timeZone != null && !timeZone.isEmpty()) {
      if (!ZoneId.getAvailableZoneIds().contains(timeZone)) {
        throw new IllegalArgumentException("time zone " + quote(timeZone) + " is not an IANA time zone (like Europe/Berlin)");
      }
      ob.setTimeZone(timeZone);
    }
    Set<String> tasks = new HashSet<>();
    for (FollowUp f : followUps) {
      Objects.requireNonNull(f, "follow-up");
      if (!f.getTaskId().isEmpty() && !tasks.add(f.getTaskId())) {
        throw new IllegalArgumentException("task id " + quote(f.getTaskId()) + " appears twice in one command");
      }
      if (f.getWhenCase() == FollowUp.WhenCase.WHEN_NOT_SET) {
        throw new IllegalArgumentException("follow-up " + quote(f.getTaskId()) + " has neither a delay nor a due time");
      }
      ob.addFollowUps(f);
    }
    return command(user).setOnboard(ob).build();
  }

  /**
   * A Cancel command for all of the user's pending follow-ups. Each one
   * cancelled is reported as {@code KIND_CANCELLED} on followup-events.
   *
   * @param user the user id
   * @return the command
   * @throws IllegalArgumentException if the user id is invalid
   */
  public Command cancel(String user) {
    return command(user).setCancel(Cancel.getDefaultInstance()).build();
  }

  /**
   * A Cancel command for one follow-up. Processed before the follow-up fires,
   * it wins ({@code KIND_CANCELLED}); after, it is reported as
   * {@code KIND_TOO_LATE} with the call's id.
   *
   * @param user the user id
   * @param task the follow-up's task id
   * @return the command
   * @throws IllegalArgumentException if the user or task id is invalid
   */
  public Command cancel(String user, String task) {
    return command(user).setCancel(Cancel.newBuilder().setTaskId(requireTask(task))).build();
  }

  /**
   * A Reschedule command moving a pending follow-up to a due time.
   *
   * @param user the user id
   * @param task the follow-up's task id
   * @param dueAt the new due time; a past one fires at once
   * @return the command
   * @throws IllegalArgumentException if an argument is invalid
   */
  public Command reschedule(String user, String task, Instant dueAt) {
    Objects.requireNonNull(dueAt, "due time");
    Reschedule r = Reschedule.newBuilder().setTaskId(requireTask(task)).setDueAt(timestamp(dueAt)).build();
    return command(user).setReschedule(r).build();
  }

  /**
   * A Reschedule command moving a pending follow-up to a delay after this
   * command's {@code requested_at}.
   *
   * @param user the user id
   * @param task the follow-up's task id
   * @param delay the new delay, not negative
   * @return the command
   * @throws IllegalArgumentException if an argument is invalid
   */
  public Command reschedule(String user, String task, Duration delay) {
    Reschedule r = Reschedule.newBuilder().setTaskId(requireTask(task)).setDelay(duration(delay)).build();
    return command(user).setReschedule(r).build();
  }

  /**
   * A Forget command: erases the user, dropping every pending follow-up and
   * the user's values in the scheduler's and dialer's tables, reported as
   * {@code KIND_FORGOTTEN} on followup-events.
   *
   * @param user the user id
   * @return the command
   * @throws IllegalArgumentException if the user id is invalid
   */
  public Command forget(String user) {
    return command(user).setForget(Forget.getDefaultInstance()).build();
  }

  /**
   * A follow-up due {@code delay} after the onboarding (its
   * {@code requested_at}). Add an action or payload with
   * {@code toBuilder()}, for example
   * {@code after("welcome", d).toBuilder().setAction(action("welcome-ivr", "")).build()}.
   *
   * @param task the task id, unique per user; empty lets the scheduler name
   *     it {@code followup-<n>}
   * @param delay the delay, not negative
   * @return the follow-up
   * @throws IllegalArgumentException if the delay is negative
   */
  public static FollowUp after(String task, Duration delay) {
    return FollowUp.newBuilder().setTaskId(Objects.requireNonNull(task, "task id")).setDelay(duration(delay)).build();
  }

  /**
   * A follow-up due at an absolute time; a past due time fires at once.
   *
   * @param task the task id, unique per user
   * @param dueAt the due time
   * @return the follow-up
   */
  public static FollowUp at(String task, Instant dueAt) {
    Objects.requireNonNull(dueAt, "due time");
    return FollowUp.newBuilder().setTaskId(Objects.requireNonNull(task, "task id")).setDueAt(timestamp(dueAt)).build();
  }

  /**
   * What a call does: the IVR script to run and the campaign it belongs to.
   *
   * @param ivrScript the script name
   * @param campaignId the campaign id, or empty
   * @return the action
   */
  public static Action action(String ivrScript, String campaignId) {
    return Action.newBuilder().setIvrScript(ivrScript).setCampaignId(campaignId).build();
  }

  /**
   * Converts an instant to a protobuf Timestamp, keeping every nanosecond.
   *
   * @param t the instant
   * @return the timestamp
   */
  public static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  /**
   * Converts a protobuf Timestamp to an instant.
   *
   * @param t the timestamp
   * @return the instant
   */
  public static Instant instant(Timestamp t) {
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }

  private static com.google.protobuf.Duration duration(Duration d) {
    Objects.requireNonNull(d, "delay");
    if (d.isNegative()) {
      throw new IllegalArgumentException("delay " + d + " is negative");
    }
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  private Command.Builder command(String user) {
    if (user == null || user.isEmpty()) {
      throw new IllegalArgumentException("user id is empty");
    }
    if (user.startsWith(RESERVED_PREFIX)) {
      throw new IllegalArgumentException("user id " + quote(user) + " starts with " + quote(RESERVED_PREFIX) + ", which is reserved");
    }
    return Command.newBuilder().setUserId(user).setRequestedAt(timestamp(clock.instant()));
  }

  private static String requireTask(String task) {
    if (task == null || task.isEmpty()) {
      throw new IllegalArgumentException("task id is empty");
    }
    return task;
  }

  private static String quote(String s) {
    return '"' + s + '"';
  }
}

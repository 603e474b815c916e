package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.ivrsched.v1.CallResult;
import com.github.ivrsched.v1.Command;
import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.Outcome;
import com.github.ivrsched.v1.ScheduleEvent;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Java client against Kafka and a running ivrsched (see {@link KafkaEnv}):
 * commands sent with {@link FollowUps}, what the scheduler and the dialer
 * publish read with {@link FollowUps#consumer}.
 */
class FollowUpsKafkaTest {
  private static final Duration WITHIN = Duration.ofSeconds(60);

  private static FollowUps followUps;
  private static Inbox<IVRCall> calls;
  private static Inbox<ScheduleEvent> events;
  private static Inbox<CallResult> results;
  private static Inbox<Command> onboarding;

  @BeforeAll
  static void connect() {
    String brokers = KafkaEnv.brokers();
    String prefix = KafkaEnv.prefix();
    followUps = FollowUps.builder(brokers).topicPrefix(prefix).build();
    calls = new Inbox<>(FollowUps.consumer(KafkaEnv.consumerConfig(brokers, "calls"), Topic.CALLS.withPrefix(prefix)), Topic.CALLS.withPrefix(prefix));
    events = new Inbox<>(FollowUps.consumer(KafkaEnv.consumerConfig(brokers, "events"), Topic.EVENTS.withPrefix(prefix)), Topic.EVENTS.withPrefix(prefix));
    results = new Inbox<>(FollowUps.consumer(KafkaEnv.consumerConfig(brokers, "results"), Topic.RESULTS.withPrefix(prefix)), Topic.RESULTS.withPrefix(prefix));
    onboarding = new Inbox<>(FollowUps.consumer(KafkaEnv.consumerConfig(brokers, "onboarding"), Topic.ONBOARDING.withPrefix(prefix)), Topic.ONBOARDING.withPrefix(prefix));
  }

  @AfterAll
  static void close() {
    for (AutoCloseable c : new AutoCloseable[] {followUps, calls, events, results, onboarding}) {
      try {
        if (c != null) {
          c.close();
        }
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    }
  }

  /** Onboarded from Java, the call fires on time, the dialer reports it, and a cancel after it is too late. */
  @Test
  void onboardedFollowUpFires() throws Exception {
    String user = KafkaEnv.unique("java-onboard");
    Instant sent = Instant.now();
    followUps.onboard(user, "+14155550101", "Europe/Berlin",
        Commands.after("welcome", Duration.ofSeconds(1)).toBuilder().setAction(Commands.action("welcome-ivr", "java")).build())
        .get(30, TimeUnit.SECONDS);

    IVRCall call = calls.await("call for " + user, c -> c.getUserId().equals(user), WITHIN).value();
    assertEquals("welcome", call.getTaskId());
    assertEquals("+14155550101", call.getPhone());
    assertEquals("Europe/Berlin", call.getTimeZone());
    assertEquals("welcome-ivr", call.getAction().getIvrScript());
    assertEquals("java", call.getAction().getCampaignId());
    assertEquals(1, call.getAttempt());
    Instant due = Commands.instant(call.getDueAt());
    Instant fired = Commands.instant(call.getFiredAt());
    assertFalse(due.isBefore(sent.plusSeconds(1)), "due " + due + " is less than 1s after the command was sent at " + sent);
    assertFalse(fired.isBefore(due), "fired at " + fired + ", before its due time " + due);
    System.out.printf("java: %s fired %s after its due time%n", user, Duration.between(due, fired));

    CallResult result = results.await("result of call " + call.getCallId(), r -> r.getCallId().equals(call.getCallId()), WITHIN).value();
    assertEquals(user, result.getUserId());
    assertTrue(result.getOutcome() != Outcome.OUTCOME_UNSPECIFIED, "the dialer reports an outcome");

    followUps.cancel(user, "welcome").get(30, TimeUnit.SECONDS);
    ScheduleEvent late = events.await("event for " + user, e -> e.getUserId().equals(user), WITHIN).value();
    assertEquals(ScheduleEvent.Kind.KIND_TOO_LATE, late.getKind());
    assertEquals(call.getCallId(), late.getCallId());
  }

  /** A cancel sent before the due time wins: no call, a KIND_CANCELLED report. */
  @Test
  void cancelBeforeTheFireWins() throws Exception {
    String user = KafkaEnv.unique("java-cancel");
    // The sentinel is due after the cancelled task: the user's calls come in
    // firing order on one partition, so once the sentinel's call is there the
    // cancelled one would have been there too.
    followUps.onboard(user, "+14155550102", "America/New_York",
        Commands.after("reminder", Duration.ofSeconds(3)),
        Commands.after("sentinel", Duration.ofSeconds(4)));
    followUps.cancel(user, "reminder").get(30, TimeUnit.SECONDS);

    ScheduleEvent cancelled = events.await("event for " + user, e -> e.getUserId().equals(user), WITHIN).value();
    assertEquals(ScheduleEvent.Kind.KIND_CANCELLED, cancelled.getKind());
    assertEquals("reminder", cancelled.getTaskId());

    calls.await("sentinel call for " + user, c -> c.getUserId().equals(user) && c.getTaskId().equals("sentinel"), WITHIN);
    assertEquals(0, calls.seen(c -> c.getUserId().equals(user) && c.getTaskId().equals("reminder")).size(), "the cancelled follow-up fired");
  }

  /** A follow-up due in an hour, rescheduled to a second from now, fires then. */
  @Test
  void rescheduleMovesTheCall() throws Exception {
    String user = KafkaEnv.unique("java-reschedule");
    followUps.onboard(user, "+14155550103", "Asia/Tokyo", Commands.after("later", Duration.ofHours(1)));
    Instant sent = Instant.now();
    followUps.reschedule(user, "later", Duration.ofSeconds(1)).get(30, TimeUnit.SECONDS);

    ScheduleEvent moved = events.await("event for " + user, e -> e.getUserId().equals(user), WITHIN).value();
    assertEquals(ScheduleEvent.Kind.KIND_RESCHEDULED, moved.getKind());
    IVRCall call = calls.await("call for " + user, c -> c.getUserId().equals(user), WITHIN).value();
    assertEquals("later", call.getTaskId());
    Instant due = Commands.instant(call.getDueAt());
    assertTrue(due.isBefore(sent.plusSeconds(60)), "due " + due + ": not rescheduled");
    assertFalse(Commands.instant(call.getFiredAt()).isBefore(due), "fired early");
  }

  /**
   * forget() sends a Forget keyed by the user, on the user's partition; the
   * scheduler erases the user (KIND_FORGOTTEN), so a cancel of the pending
   * follow-up then finds nothing.
   */
  @Test
  void forgetErasesTheUser() throws Exception {
    String user = KafkaEnv.unique("java-forget");
    followUps.onboard(user, "+14155550104", "Europe/London", Commands.after("later", Duration.ofHours(1)));
    Instant before = Instant.now();
    RecordMetadata md = followUps.forget(user).get(30, TimeUnit.SECONDS);

    ConsumerRecord<String, Command> r = onboarding.await("forget of " + user, c -> c.getUserId().equals(user) && c.hasForget(), WITHIN);
    assertEquals(user, r.key());
    assertEquals(md.partition(), r.partition());
    assertEquals(md.offset(), r.offset());
    assertFalse(Commands.instant(r.value().getRequestedAt()).isBefore(before.minusSeconds(1)), "requested_at is the send time");

    ScheduleEvent forgotten = events.await("event for " + user, e -> e.getUserId().equals(user), WITHIN).value();
    assertEquals(ScheduleEvent.Kind.KIND_FORGOTTEN, forgotten.getKind());
    assertEquals("erased", forgotten.getDetail());
    followUps.cancel(user, "later").get(30, TimeUnit.SECONDS);
    ScheduleEvent unknown = events.await("second event for " + user, e -> e.getUserId().equals(user) && e.getKind() != ScheduleEvent.Kind.KIND_FORGOTTEN, WITHIN).value();
    assertEquals(ScheduleEvent.Kind.KIND_UNKNOWN_TASK, unknown.getKind());
  }
}

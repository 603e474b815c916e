package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.ivrsched.v1.Command;
import com.github.ivrsched.v1.FollowUp;
import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.ScheduleEvent;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import org.apache.kafka.common.errors.SerializationException;
import org.junit.jupiter.api.Test;

/** The commands the client builds, without Kafka. */
class CommandsTest {
  private static final Instant NOW = Instant.parse("2026-03-01T12:00:00.123456789Z");
  private final Commands commands = new Commands(Clock.fixed(NOW, ZoneOffset.UTC));

  @Test
  void onboardCarriesEverythingAndTheClocksTime() {
    Command c = commands.onboard("u1", "+14155550123", "Europe/Berlin",
        Commands.after("welcome", Duration.ofMillis(1500)).toBuilder().setAction(Commands.action("welcome-ivr", "spring")).build(),
        Commands.at("reminder", Instant.parse("2026-03-08T09:30:00.000000001Z")));
    assertEquals("u1", c.getUserId());
    assertEquals(NOW, Commands.instant(c.getRequestedAt()));
    assertEquals(Command.CommandCase.ONBOARD, c.getCommandCase());
    assertEquals("+14155550123", c.getOnboard().getPhone());
    assertEquals("Europe/Berlin", c.getOnboard().getTimeZone());
    FollowUp welcome = c.getOnboard().getFollowUps(0);
    assertEquals("welcome", welcome.getTaskId());
    assertEquals(1, welcome.getDelay().getSeconds());
    assertEquals(500_000_000, welcome.getDelay().getNanos());
    assertEquals("welcome-ivr", welcome.getAction().getIvrScript());
    assertEquals("spring", welcome.getAction().getCampaignId());
    FollowUp reminder = c.getOnboard().getFollowUps(1);
    assertEquals(Instant.parse("2026-03-08T09:30:00.000000001Z"), Commands.instant(reminder.getDueAt()));
  }

  @Test
  void onboardWithoutPhoneZoneOrFollowUpsKeepsTheUsers() {
    Command c = commands.onboard("u1", null, "");
    assertTrue(c.hasOnboard());
    assertEquals("", c.getOnboard().getPhone());
    assertEquals("", c.getOnboard().getTimeZone());
    assertEquals(0, c.getOnboard().getFollowUpsCount());
  }

  @Test
  void cancelRescheduleForget() {
    assertEquals("welcome", commands.cancel("u1", "welcome").getCancel().getTaskId());
    Command all = commands.cancel("u1");
    assertTrue(all.hasCancel());
    assertEquals("", all.getCancel().getTaskId());

    Command at = commands.reschedule("u1", "welcome", Instant.parse("2026-03-02T10:00:00.5Z"));
    assertEquals(Instant.parse("2026-03-02T10:00:00.5Z"), Commands.instant(at.getReschedule().getDueAt()));
    Command in = commands.reschedule("u1", "welcome", Duration.ofMinutes(45));
    assertEquals(2700, in.getReschedule().getDelay().getSeconds());
    assertEquals("welcome", in.getReschedule().getTaskId());

    Command f = commands.forget("u1");
    assertEquals(Command.CommandCase.FORGET, f.getCommandCase());
    assertEquals(NOW, Commands.instant(f.getRequestedAt()));
  }

  @Test
  void badArgumentsSayWhatIsWrong() {
    assertMessage("user id is empty", () -> commands.cancel(""));
    assertMessage("user id \"__ivrsched-tick-1\" starts with \"__ivrsched-\", which is reserved", () -> commands.forget("__ivrsched-tick-1"));
    assertMessage("phone \"4155550123\" is not E.164 (like +14155550123)", () -> commands.onboard("u1", "4155550123", null));
    assertMessage("time zone \"Mars/Olympus\" is not an IANA time zone (like Europe/Berlin)", () -> commands.onboard("u1", null, "Mars/Olympus"));
    assertMessage("time zone \"+02:00\" is not an IANA time zone (like Europe/Berlin)", () -> commands.onboard("u1", null, "+02:00"));
    assertMessage("task id \"a\" appears twice in one command",
        () -> commands.onboard("u1", null, null, Commands.after("a", Duration.ZERO), Commands.after("a", Duration.ofSeconds(1))));
    assertMessage("follow-up \"a\" has neither a delay nor a due time",
        () -> commands.onboard("u1", null, null, FollowUp.newBuilder().setTaskId("a").build()));
    assertMessage("delay PT-1S is negative", () -> Commands.after("a", Duration.ofSeconds(-1)));
    assertMessage("task id is empty", () -> commands.cancel("u1", ""));
    assertMessage("task id is empty", () -> commands.reschedule("u1", null, Duration.ZERO));
  }

  @Test
  void serializerAndDeserializersRoundTrip() {
    Command c = commands.onboard("u1", "+14155550123", null, Commands.after("welcome", Duration.ofSeconds(1)));
    byte[] wire = new ProtobufSerializer<Command>().serialize("onboarding", c);
    assertEquals(c, new CommandDeserializer().deserialize("onboarding", wire));
    assertNull(new ProtobufSerializer<Command>().serialize("onboarding", null));
    assertNull(new IVRCallDeserializer().deserialize("ivr-calls", null));

    IVRCall call = IVRCall.newBuilder().setCallId("c1").setUserId("u1").setPhone("+14155550123").build();
    assertEquals(call, Topic.CALLS.deserializer().deserialize("ivr-calls", call.toByteArray()));
    ScheduleEvent e = ScheduleEvent.newBuilder().setUserId("u1").setKind(ScheduleEvent.Kind.KIND_FORGOTTEN).build();
    assertEquals(e, Topic.EVENTS.deserializer().deserialize("followup-events", e.toByteArray()));

    SerializationException bad = assertThrows(SerializationException.class,
        () -> new IVRCallDeserializer().deserialize("ivr-calls", new byte[] {(byte) 0xff, 0x01}));
    assertEquals("topic ivr-calls: a record of 2 bytes is not an ivrsched IVRCall", bad.getMessage());
  }

  @Test
  void topicsTakeIvrschedsPrefix() {
    assertEquals("onboarding", Topic.ONBOARDING.name());
    assertEquals("t1-ivr-calls", Topic.CALLS.withPrefix("t1-").name());
    assertEquals("t2-followup-events", Topic.EVENTS.withPrefix("t1-").withPrefix("t2-").name());
    assertEquals("ivr-results", Topic.RESULTS.toString());
    assertFalse(Topic.RESULTS.deserializer() == Topic.RESULTS.deserializer(), "a new deserializer per call");
  }

  private static void assertMessage(String want, Runnable r) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, r::run);
    assertEquals(want, e.getMessage());
  }
}

package com.github.ivrsched.client;

import com.google.protobuf.ByteString;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The Java side of the contract check across Go, Java and Node.js
 * (systemtest/clients_test.go): the same logical commands, written with each
 * client's API, must decode to equal messages and land on the same
 * partitions. This test sends them to the onboarding topic under the prefix
 * IVRSCHED_CONTRACT_PREFIX (no scheduler reads it); the Go test compares.
 * The same list is in clients/node/test/contract.test.js and in the Go test.
 */
class ContractTest {
  /** requested_at of every contract command. */
  static final Instant REQUESTED = Instant.parse("2026-03-01T12:00:00.123Z");

  @Test
  void sendContractCommands() throws Exception {
    String brokers = KafkaEnv.brokers();
    String prefix = KafkaEnv.require("IVRSCHED_CONTRACT_PREFIX", "the contract check sets it");
    try (FollowUps f = FollowUps.builder(brokers).topicPrefix(prefix)
        .clock(Clock.fixed(REQUESTED, ZoneOffset.UTC))
        .timeout(Duration.ofSeconds(15)) // a missing topic fails each send within 15 s
        .build()) {
      CompletableFuture<?>[] sent = {
        f.onboard("contract-alice", "+14155550123", "Europe/Berlin",
            Commands.after("welcome", Duration.ofSeconds(90)).toBuilder().setAction(Commands.action("welcome-ivr", "spring-2026")).build(),
            Commands.at("reminder", Instant.parse("2026-03-08T09:30:00.000000001Z")).toBuilder()
                .setPayload(ByteString.copyFromUtf8("{\"lang\":\"de\"}")).build()),
        f.onboard("contract-frank", null, null),
        f.cancel("contract-bob", "welcome"),
        f.cancel("contract-carol"),
        f.reschedule("contract-dave", "welcome", Instant.parse("2026-03-02T10:00:00.5Z")),
        f.reschedule("contract-erin", "welcome", Duration.ofMinutes(45)),
        f.forget("contract-zoë"),
      };
      CompletableFuture.allOf(sent).get(30, TimeUnit.SECONDS);
    }
  }
}

package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.errors.TimeoutException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The builder's client without a cluster: it gives up soon, and says where it looked. */
class FollowUpsTest {
  @Test
  @Timeout(value = 30, unit = TimeUnit.SECONDS)
  void noBrokerFailsWithinTheDefaultTimeoutNamingBrokersAndPrefix() {
    long began = System.nanoTime();
    ExecutionException e;
    try (FollowUps f = FollowUps.builder("127.0.0.1:1").topicPrefix("staging-").build()) {
      e = assertThrows(ExecutionException.class, () -> f.forget("u1").get());
    }
    Duration took = Duration.ofNanos(System.nanoTime() - began);
    TimeoutException t = assertInstanceOf(TimeoutException.class, e.getCause());
    String msg = t.getMessage();
    assertTrue(msg.startsWith("topic staging-onboarding at brokers 127.0.0.1:1 with topic prefix \"staging-\": "), msg);
    assertTrue(msg.contains("5000 ms"), msg);
    assertTrue(took.compareTo(Duration.ofSeconds(20)) < 0, "took " + took);
  }

  @Test
  void timeoutMustBePositive() {
    FollowUps.Builder b = FollowUps.builder("127.0.0.1:1");
    assertThrows(IllegalArgumentException.class, () -> b.timeout(Duration.ZERO));
    assertThrows(IllegalArgumentException.class, () -> b.timeout(Duration.ofSeconds(-1)));
  }
}

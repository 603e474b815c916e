package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.github.ivrsched.v1.IVRCall;
import example.Onboard;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The README's Java example (example.Onboard), run as written; the Go test
 * TestClientSnippetsInReadme checks that clients/java/README.md shows it.
 */
class ReadmeExampleTest {
  @Test
  @Timeout(value = 90, unit = TimeUnit.SECONDS)
  void readmeExample() throws Exception {
    String user = KafkaEnv.unique("u42");
    IVRCall call = Onboard.onboardAndAwaitCall(KafkaEnv.brokers(), KafkaEnv.prefix(), user);
    assertEquals(user, call.getUserId());
    assertEquals("welcome", call.getTaskId());
    assertEquals("+14155550142", call.getPhone());
  }
}

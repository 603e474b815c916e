package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.github.ivrsched.v1.IVRCall;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java snippet of the README's "Clients" section, run as written (the Go
 * test TestClientSnippetsInReadme checks that the README shows these lines).
 */
class ReadmeExampleTest {
  @Test
  @Timeout(value = 60, unit = TimeUnit.SECONDS)
  void readmeSnippet() throws Exception {
    String brokers = KafkaEnv.brokers();
    String prefix = KafkaEnv.prefix(); // ivrsched's --topic-prefix, usually ""
    String user = KafkaEnv.unique("u42");

    // README: java begin
    try (FollowUps followUps = FollowUps.builder(brokers).topicPrefix(prefix).build()) {
      followUps.onboard(user, "+14155550142", "America/New_York",
          Commands.after("welcome", Duration.ofSeconds(2))).get();
    }
    Map<String, Object> config = Map.of("bootstrap.servers", brokers, "group.id", "dialer-" + user);
    IVRCall call = null;
    try (KafkaConsumer<String, IVRCall> calls = FollowUps.consumer(config, Topic.CALLS.withPrefix(prefix))) {
      while (call == null) {
        for (ConsumerRecord<String, IVRCall> r : calls.poll(Duration.ofSeconds(1))) {
          if (r.key().equals(user)) {
            call = r.value();
          }
        }
      }
    }
    System.out.println("call " + call.getCallId() + " to " + call.getPhone());
    // README: java end

    assertEquals("welcome", call.getTaskId());
    assertEquals("+14155550142", call.getPhone());
  }
}

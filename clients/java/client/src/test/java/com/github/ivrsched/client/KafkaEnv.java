package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.junit.jupiter.api.Assumptions;

/**
 * The Kafka cluster and the ivrsched that the Kafka tests run against:
 * KAFKA_BROKERS (host:port,...) and IVRSCHED_TOPIC_PREFIX (ivrsched's
 * --topic-prefix). The Go system test systemtest/clients_test.go starts
 * Apache Kafka and ivrsched and sets both. Without KAFKA_BROKERS the tests
 * are skipped, except under CI=true, where they fail.
 */
final class KafkaEnv {
  private KafkaEnv() {}

  static String brokers() {
    return require("KAFKA_BROKERS", "the Kafka tests need a cluster with ivrsched running on it (the Go system test sets it)");
  }

  static String prefix() {
    String p = System.getenv("IVRSCHED_TOPIC_PREFIX");
    return p == null ? "" : p;
  }

  /** Returns the value of a variable a test needs: skipped without it, failed under CI=true. */
  static String require(String name, String why) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      String msg = name + " is not set: " + why;
      if ("true".equals(System.getenv("CI"))) {
        fail(msg + " (CI=true: failing instead of skipping)");
      }
      Assumptions.abort(msg);
    }
    return v;
  }

  /** Consumer properties of a new group, so each test reads its topics from the start. */
  static Map<String, Object> consumerConfig(String brokers, String what) {
    return Map.of(
        ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers,
        ConsumerConfig.GROUP_ID_CONFIG, unique("ivrsched-java-test-" + what),
        ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
  }

  static String unique(String base) {
    return base + "-" + UUID.randomUUID().toString().substring(0, 8);
  }
}

package com.github.ivrsched.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.errors.RecordDeserializationException;

/**
 * Everything a consumer of one topic has received, for tests to wait on. One
 * test thread at a time.
 */
final class Inbox<T> implements AutoCloseable {
  private final KafkaConsumer<String, T> consumer;
  private final String topic;
  private final List<ConsumerRecord<String, T>> received = new ArrayList<>();
  private int undecodable;

  Inbox(KafkaConsumer<String, T> consumer, Topic<T> topic) {
    this.consumer = consumer;
    this.topic = topic.name();
  }

  /** Returns the first record received whose value matches, polling for it up to {@code within}. */
  ConsumerRecord<String, T> await(String what, Predicate<T> match, Duration within) {
    Instant deadline = Instant.now().plus(within);
    int checked = 0;
    while (true) {
      for (; checked < received.size(); checked++) {
        if (match.test(received.get(checked).value())) {
          return received.get(checked);
        }
      }
      Duration left = Duration.between(Instant.now(), deadline);
      if (left.isNegative()) {
        fail("no " + what + " on " + topic + " within " + within + " (" + received.size()
            + " other records, " + undecodable + " undecodable); is ivrsched running on KAFKA_BROKERS with --topic-prefix $IVRSCHED_TOPIC_PREFIX?");
      }
      try {
        consumer.poll(left.compareTo(Duration.ofMillis(500)) < 0 ? left : Duration.ofMillis(500)).forEach(received::add);
      } catch (RecordDeserializationException e) {
        // Not an ivrsched message (the Node.js tests write one to the
        // onboarding topic): skip it, as a service would after logging it.
        undecodable++;
        consumer.seek(e.topicPartition(), e.offset() + 1);
      }
    }
  }

  /** Returns the values received so far that match. */
  List<T> seen(Predicate<T> match) {
    List<T> out = new ArrayList<>();
    for (ConsumerRecord<String, T> r : received) {
      if (match.test(r.value())) {
        out.add(r.value());
      }
    }
    return out;
  }

  @Override
  public void close() {
    consumer.close();
  }
}

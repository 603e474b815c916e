package com.github.ivrsched.client;

import com.google.protobuf.MessageLite;
import org.apache.kafka.common.serialization.Serializer;

/**
 * A Kafka serializer that writes a protobuf message in its binary form, as
 * ivrsched reads it. Use it for the value of the records you produce to the
 * onboarding topic (a {@code KafkaProducer<String, Command>}, or Spring's
 * {@code spring.kafka.producer.value-serializer}). A null value stays null.
 *
 * <p>Stateless and safe to share between threads.
 *
 * @param <T> the message type
 */
public final class ProtobufSerializer<T extends MessageLite> implements Serializer<T> {
  /** Creates the serializer; Kafka and Spring instantiate it by class name. */
  public ProtobufSerializer() {}

  @Override
  public byte[] serialize(String topic, T data) {
    return data == null ? null : data.toByteArray();
  }
}

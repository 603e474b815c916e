package com.github.ivrsched.client;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Parser;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * A Kafka deserializer that reads one protobuf message type from its binary
 * form. Bytes that are not that message raise a {@link SerializationException}
 * naming the topic and the type (with Spring, wrap it in an
 * {@code ErrorHandlingDeserializer} to skip such records). A null value (a
 * tombstone) stays null. The concrete subclasses, one per topic ivrsched
 * writes, have the no-argument constructor Kafka and Spring need.
 *
 * <p>Stateless and safe to share between threads.
 *
 * @param <T> the message type
 */
public abstract class ProtobufDeserializer<T> implements Deserializer<T> {
  private final Parser<T> parser;
  private final String type;

  /**
   * Creates a deserializer for one message type.
   *
   * @param parser the type's parser, like {@code IVRCall.parser()}
   * @param type the type's name, for error messages
   */
  protected ProtobufDeserializer(Parser<T> parser, String type) {
    this.parser = parser;
    this.type = type;
  }

  @Override
  public T deserialize(String topic, byte[] data) {
    if (data == null) {
      return null;
    }
    try {
      return parser.parseFrom(data);
    } catch (InvalidProtocolBufferException e) {
      throw new SerializationException("topic " + topic + ": a record of " + data.length + " bytes is not an ivrsched " + type, e);
    }
  }
}

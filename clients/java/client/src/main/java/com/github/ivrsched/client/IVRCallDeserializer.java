package com.github.ivrsched.client;

import com.github.ivrsched.v1.IVRCall;

/**
 * Reads {@link IVRCall} values, the records of ivr-calls: a call to place, published by the scheduler.
 */
public final class IVRCallDeserializer extends ProtobufDeserializer<IVRCall> {
  /** Creates the deserializer; Kafka and Spring instantiate it by class name. */
  public IVRCallDeserializer() {
    super(IVRCall.parser(), "IVRCall");
  }
}

package com.github.ivrsched.client;

import com.github.ivrsched.v1.CallResult;

/**
 * Reads {@link CallResult} values, the records of ivr-results: the outcome of a call, published by the dialer.
 */
public final class CallResultDeserializer extends ProtobufDeserializer<CallResult> {
  /** Creates the deserializer; Kafka and Spring instantiate it by class name. */
  public CallResultDeserializer() {
    super(CallResult.parser(), "CallResult");
  }
}

package com.github.ivrsched.client;

import com.github.ivrsched.v1.Command;

/**
 * Reads {@link Command} values, the records of onboarding: a command for the scheduler (to read back what producers wrote).
 */
public final class CommandDeserializer extends ProtobufDeserializer<Command> {
  /** Creates the deserializer; Kafka and Spring instantiate it by class name. */
  public CommandDeserializer() {
    super(Command.parser(), "Command");
  }
}

package com.github.ivrsched.client;

import com.github.ivrsched.v1.ScheduleEvent;

/**
 * Reads {@link ScheduleEvent} values, the records of followup-events: what a command did to a user's follow-ups (cancelled, rescheduled, too late, unknown task, forgotten).
 */
public final class ScheduleEventDeserializer extends ProtobufDeserializer<ScheduleEvent> {
  /** Creates the deserializer; Kafka and Spring instantiate it by class name. */
  public ScheduleEventDeserializer() {
    super(ScheduleEvent.parser(), "ScheduleEvent");
  }
}

package com.github.ivrsched.example.onboarding;

// README: spring listener begin
import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.ScheduleEvent;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.stereotype.Component;

/**
 * Listens to what ivrsched publishes. The value deserializer is Spring's
 * ErrorHandlingDeserializer (application.properties), which hands a record
 * it cannot read to the error handler instead of stopping the listener; each
 * listener names the ivrsched deserializer of its topic's type.
 */
@Component
class FollowUpListener {
  private final FollowUpHandler handler;

  FollowUpListener(FollowUpHandler handler) {
    this.handler = handler;
  }

  @KafkaListener(topics = "${ivrsched.topic-prefix}ivr-calls",
      properties = "spring.deserializer.value.delegate.class=com.github.ivrsched.client.IVRCallDeserializer")
  void call(IVRCall call) {
    handler.call(call); // the follow-up is due: place the call
  }

  @KafkaListener(topics = "${ivrsched.topic-prefix}followup-events",
      properties = "spring.deserializer.value.delegate.class=com.github.ivrsched.client.ScheduleEventDeserializer")
  void report(ScheduleEvent event) {
    handler.report(event); // cancelled, rescheduled, too late, forgotten
  }
}
// README: spring listener end

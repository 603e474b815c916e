package com.github.ivrsched.example.onboarding;

// README: spring handler begin
import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.ScheduleEvent;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.stereotype.Component;

/**
 * The service's own work, called by {@link FollowUpListener} on the listener
 * threads: place a call that ivrsched fired, take note of a report.
 */
public interface FollowUpHandler {
  /**
   * A follow-up fired: place the call (the call id is an idempotency key: a
   * redelivered call has the same one).
   *
   * @param call the call
   */
  void call(IVRCall call);

  /**
   * ivrsched reports what a command did (cancelled, rescheduled, too late,
   * unknown task, forgotten).
   *
   * @param event the report
   */
  void report(ScheduleEvent event);

  /** Logs calls and reports; a bean the service's own handler, marked @Primary, replaces. */
  @Component
  final class Logging implements FollowUpHandler {
    private static final Logger log = LoggerFactory.getLogger(Logging.class);

    @Override
    public void call(IVRCall call) {
      log.info("call {} to {} (user {}, task {}, script {})", call.getCallId(), call.getPhone(), call.getUserId(),
          call.getTaskId(), call.getAction().getIvrScript());
    }

    @Override
    public void report(ScheduleEvent event) {
      log.info("user {} task {}: {} {}", event.getUserId(), event.getTaskId(), event.getKind(), event.getDetail());
    }
  }
}
// README: spring handler end

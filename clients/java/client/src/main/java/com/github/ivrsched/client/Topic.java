package com.github.ivrsched.client;

import com.github.ivrsched.v1.CallResult;
import com.github.ivrsched.v1.Command;
import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.ScheduleEvent;
import java.util.Objects;
import java.util.function.Supplier;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * One of ivrsched's topics with the message type its records carry. Every
 * topic is keyed by user id. When ivrsched runs with {@code --topic-prefix P},
 * use {@code Topic.CALLS.withPrefix("P")}.
 *
 * <p>Instances are immutable.
 *
 * @param <T> the type of the records' values
 */
public final class Topic<T> {
  /** {@code onboarding}: the scheduler's input, {@link Command}s from your producers. */
  public static final Topic<Command> ONBOARDING = new Topic<>("", "onboarding", CommandDeserializer::new);
  /** {@code ivr-calls}: the calls to place, {@link IVRCall}s published by the scheduler when follow-ups fire. */
  public static final Topic<IVRCall> CALLS = new Topic<>("", "ivr-calls", IVRCallDeserializer::new);
  /** {@code ivr-results}: the outcome of each call, {@link CallResult}s published by the dialer. */
  public static final Topic<CallResult> RESULTS = new Topic<>("", "ivr-results", CallResultDeserializer::new);
  /**
   * {@code followup-events}: {@link ScheduleEvent}s reporting what commands did
   * (cancelled, rescheduled, too late, unknown task, forgotten).
   */
  public static final Topic<ScheduleEvent> EVENTS = new Topic<>("", "followup-events", ScheduleEventDeserializer::new);

  private final String prefix;
  private final String base;
  private final Supplier<Deserializer<T>> deserializer;

  private Topic(String prefix, String base, Supplier<Deserializer<T>> deserializer) {
    this.prefix = prefix;
    this.base = base;
    this.deserializer = deserializer;
  }

  /**
   * Returns this topic under ivrsched's {@code --topic-prefix}.
   *
   * @param prefix the prefix (replaces any prefix set before)
   * @return the prefixed topic
   */
  public Topic<T> withPrefix(String prefix) {
    return new Topic<>(Objects.requireNonNull(prefix, "prefix"), base, deserializer);
  }

  /**
   * Returns the topic's name, prefix included.
   *
   * @return the name
   */
  public String name() {
    return prefix + base;
  }

  /**
   * Returns a new deserializer for the topic's values.
   *
   * @return the deserializer
   */
  public Deserializer<T> deserializer() {
    return deserializer.get();
  }

  @Override
  public String toString() {
    return name();
  }
}

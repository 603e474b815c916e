/**
 * The Java client of ivrsched, a Kafka-native scheduler of per-user follow-up
 * calls.
 *
 * <p>{@link com.github.ivrsched.client.FollowUps} sends commands (onboard,
 * cancel, reschedule, forget) to the onboarding topic;
 * {@link com.github.ivrsched.client.Commands} builds them for a producer of
 * your own; {@link com.github.ivrsched.client.FollowUps#consumer} reads the
 * calls, call results and follow-up events the scheduler publishes, typed by
 * {@link com.github.ivrsched.client.Topic}. The message classes in
 * {@code com.github.ivrsched.v1} are generated from ivrsched's wire contract,
 * {@code codec/ivrsched.proto}, when this library is built.
 */
package com.github.ivrsched.client;

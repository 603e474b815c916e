/**
 * A Spring Boot onboarding service that schedules each user's follow-up call
 * with ivrsched instead of an {@code @Scheduled} poller or ActiveMQ's
 * {@code AMQ_SCHEDULED_DELAY}.
 */
package com.github.ivrsched.example.onboarding;

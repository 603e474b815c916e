package com.github.ivrsched.example.onboarding;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * An onboarding service on ivrsched: it stores nothing and runs no poller.
 * {@link UserController} publishes each user's follow-up call to ivrsched
 * with a {@code KafkaTemplate}; {@link FollowUpListener} places the call
 * when ivrsched fires it and reads ivrsched's reports.
 */
@SpringBootApplication
public class OnboardingApplication {
  /**
   * Starts the service.
   *
   * @param args Spring Boot's arguments
   */
  public static void main(String[] args) {
    SpringApplication.run(OnboardingApplication.class, args);
  }
}

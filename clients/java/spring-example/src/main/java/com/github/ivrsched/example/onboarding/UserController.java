package com.github.ivrsched.example.onboarding;

// README: spring controller begin
import com.github.ivrsched.client.Commands;
import com.github.ivrsched.v1.Command;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.http.ResponseEntity;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.web.bind.annotation.DeleteMapping;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

/**
 * The users API. Each request becomes one ivrsched command, sent keyed by
 * the user id with Spring's {@link KafkaTemplate} (the producer's default
 * partitioner is ivrsched's murmur2) and answered once Kafka acknowledged it.
 */
@RestController
class UserController {
  /** A new user: who to call, in which zone, and how long after onboarding. */
  record NewUser(String id, String phone, String timeZone, long callAfterSeconds) {}

  private final KafkaTemplate<String, Command> kafka;
  private final String onboarding;
  private final Commands commands = Commands.systemClock();

  UserController(KafkaTemplate<String, Command> kafka, @Value("${ivrsched.topic-prefix}onboarding") String onboarding) {
    this.kafka = kafka;
    this.onboarding = onboarding;
  }

  @PostMapping("/users")
  ResponseEntity<Void> onboard(@RequestBody NewUser user) throws Exception {
    Command welcome = commands.onboard(user.id(), user.phone(), user.timeZone(),
        Commands.after("welcome-call", Duration.ofSeconds(user.callAfterSeconds())));
    kafka.send(onboarding, user.id(), welcome).get(10, TimeUnit.SECONDS); // acknowledged by Kafka
    return ResponseEntity.accepted().build();
  }

  // Commands rejects what the scheduler would (not E.164, no such zone...): a 400 naming it.
  @ExceptionHandler(IllegalArgumentException.class)
  ResponseEntity<String> badRequest(IllegalArgumentException e) {
    return ResponseEntity.badRequest().body(e.getMessage() + "\n");
  }

  @DeleteMapping("/users/{id}/follow-ups/{task}")
  ResponseEntity<Void> cancel(@PathVariable String id, @PathVariable String task) throws Exception {
    send(commands.cancel(id, task));
    return ResponseEntity.accepted().build();
  }

  @DeleteMapping("/users/{id}")
  ResponseEntity<Void> forget(@PathVariable String id) throws Exception {
    send(commands.forget(id));
    return ResponseEntity.accepted().build();
  }

  private void send(Command c) throws InterruptedException, ExecutionException, TimeoutException {
    kafka.send(onboarding, c.getUserId(), c).get(10, TimeUnit.SECONDS);
  }
}
// README: spring controller end

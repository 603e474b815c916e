package com.github.ivrsched.example.onboarding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

import com.github.ivrsched.v1.IVRCall;
import com.github.ivrsched.v1.ScheduleEvent;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Primary;

/**
 * The service against Kafka and a running ivrsched (KAFKA_BROKERS and
 * IVRSCHED_TOPIC_PREFIX, set by the Go system test systemtest/clients_test.go;
 * skipped without them, failed under CI=true): POST /users, and the call
 * fires in the service's listener; a cancel after it is reported too late,
 * and DELETE /users/{id} erases the user.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = {"spring.kafka.consumer.group-id=onboarding-service-test-${random.uuid}",
        "logging.level.org.apache.kafka=WARN", "spring.main.banner-mode=off"})
class OnboardingApplicationTest {
  private static final Duration WITHIN = Duration.ofSeconds(60);

  /** Records what the listeners hand to the service. */
  @TestConfiguration
  static class Recording {
    final BlockingQueue<IVRCall> calls = new LinkedBlockingQueue<>();
    final BlockingQueue<ScheduleEvent> events = new LinkedBlockingQueue<>();

    @Bean
    @Primary
    FollowUpHandler recordingHandler() {
      return new FollowUpHandler() {
        @Override
        public void call(IVRCall call) {
          calls.add(call);
        }

        @Override
        public void report(ScheduleEvent event) {
          events.add(event);
        }
      };
    }
  }

  @BeforeAll
  static void needKafka() {
    String brokers = System.getenv("KAFKA_BROKERS");
    if (brokers == null || brokers.isEmpty()) {
      String msg = "KAFKA_BROKERS is not set: the Spring example's test needs a cluster with ivrsched running on it";
      if ("true".equals(System.getenv("CI"))) {
        fail(msg + " (CI=true: failing instead of skipping)");
      }
      Assumptions.abort(msg);
    }
  }

  @Value("${local.server.port}")
  int port;

  @Autowired
  Recording recording;

  private final HttpClient http = HttpClient.newHttpClient();

  @Test
  void onboardedUserGetsTheCall() throws Exception {
    String user = "spring-" + UUID.randomUUID().toString().substring(0, 8);
    Instant sent = Instant.now();
    HttpResponse<String> created = post("/users",
        "{\"id\":\"" + user + "\",\"phone\":\"+14155550199\",\"timeZone\":\"America/Chicago\",\"callAfterSeconds\":1}");
    assertEquals(202, created.statusCode(), created.body());

    IVRCall call = await(recording.calls, c -> c.getUserId().equals(user), "call for " + user);
    assertEquals("welcome-call", call.getTaskId());
    assertEquals("+14155550199", call.getPhone());
    assertEquals("America/Chicago", call.getTimeZone());
    Instant due = Instant.ofEpochSecond(call.getDueAt().getSeconds(), call.getDueAt().getNanos());
    Instant fired = Instant.ofEpochSecond(call.getFiredAt().getSeconds(), call.getFiredAt().getNanos());
    assertFalse(due.isBefore(sent.plusSeconds(1)), "due " + due + ", sent " + sent);
    assertFalse(fired.isBefore(due), "fired early");
    System.out.printf("spring: %s called %s after its due time%n", user, Duration.between(due, fired));

    HttpResponse<String> cancelled = delete("/users/" + user + "/follow-ups/welcome-call");
    assertEquals(202, cancelled.statusCode(), cancelled.body());
    ScheduleEvent late = await(recording.events, e -> e.getUserId().equals(user), "report for " + user);
    assertEquals(ScheduleEvent.Kind.KIND_TOO_LATE, late.getKind());
    assertEquals(call.getCallId(), late.getCallId());

    HttpResponse<String> forgotten = delete("/users/" + user);
    assertEquals(202, forgotten.statusCode(), forgotten.body());
    ScheduleEvent erased = await(recording.events, e -> e.getUserId().equals(user), "second report for " + user);
    assertEquals(ScheduleEvent.Kind.KIND_FORGOTTEN, erased.getKind());
  }

  @Test
  void badPhoneIsABadRequest() throws Exception {
    HttpResponse<String> r = post("/users", "{\"id\":\"spring-bad\",\"phone\":\"555-0199\",\"callAfterSeconds\":1}");
    assertEquals(400, r.statusCode());
    assertEquals("phone \"555-0199\" is not E.164 (like +14155550123)\n", r.body());
  }

  private HttpResponse<String> post(String path, String json) throws Exception {
    return http.send(HttpRequest.newBuilder(uri(path)).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(json)).build(), HttpResponse.BodyHandlers.ofString());
  }

  private HttpResponse<String> delete(String path) throws Exception {
    return http.send(HttpRequest.newBuilder(uri(path)).DELETE().build(), HttpResponse.BodyHandlers.ofString());
  }

  private URI uri(String path) {
    return URI.create("http://127.0.0.1:" + port + path);
  }

  private static <T> T await(BlockingQueue<T> q, Predicate<T> match, String what) throws InterruptedException {
    long deadline = System.nanoTime() + WITHIN.toNanos();
    while (true) {
      T t = q.poll(deadline - System.nanoTime(), TimeUnit.NANOSECONDS);
      if (t == null) {
        fail("no " + what + " within " + WITHIN + "; is ivrsched running on KAFKA_BROKERS with --topic-prefix $IVRSCHED_TOPIC_PREFIX?");
      }
      assertNotNull(t);
      if (match.test(t)) {
        return t;
      }
    }
  }
}

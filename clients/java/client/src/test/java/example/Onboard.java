package example;

// The README's Java example, run as written by ReadmeExampleTest (the Go
// test TestClientSnippetsInReadme checks that the README shows it). It uses
// the client's public API only, from a package of its own, as a service would.

// README: java begin
import com.github.ivrsched.client.Commands;
import com.github.ivrsched.client.FollowUps;
import com.github.ivrsched.client.Topic;
import com.github.ivrsched.v1.IVRCall;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;

public class Onboard {
  public static void main(String[] args) throws Exception {
    String brokers = System.getenv().getOrDefault("KAFKA_BROKERS", "localhost:9092");
    String prefix = System.getenv().getOrDefault("IVRSCHED_TOPIC_PREFIX", ""); // ivrsched's --topic-prefix
    String user = args.length > 0 ? args[0] : "u42";
    IVRCall call = onboardAndAwaitCall(brokers, prefix, user);
    System.out.println("call " + call.getCallId() + " (" + call.getTaskId() + ") to " + call.getPhone());
  }

  public static IVRCall onboardAndAwaitCall(String brokers, String prefix, String user) throws Exception {
    try (FollowUps followUps = FollowUps.builder(brokers).topicPrefix(prefix).build()) {
      followUps.onboard(user, "+14155550142", "America/New_York",
          Commands.after("welcome", Duration.ofSeconds(2))).get(); // acknowledged by Kafka
    }
    Map<String, Object> config = Map.of("bootstrap.servers", brokers, "group.id", "dialer-" + user);
    Instant deadline = Instant.now().plusSeconds(60);
    try (KafkaConsumer<String, IVRCall> calls = FollowUps.consumer(config, Topic.CALLS.withPrefix(prefix))) {
      while (Instant.now().isBefore(deadline)) {
        for (ConsumerRecord<String, IVRCall> r : calls.poll(Duration.ofSeconds(1))) {
          if (r.key().equals(user)) {
            return r.value();
          }
        }
      }
    }
    throw new IllegalStateException("no call for " + user + " on " + Topic.CALLS.withPrefix(prefix) + " within 60 s");
  }
}
// README: java end

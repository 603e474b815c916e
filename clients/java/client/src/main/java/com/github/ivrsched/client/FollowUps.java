package com.github.ivrsched.client;

import com.github.ivrsched.v1.Command;
import com.github.ivrsched.v1.FollowUp;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Sends commands to ivrsched: onboard a user with follow-ups, cancel,
 * reschedule, forget. Each command is one record on the onboarding topic,
 * keyed by the user id and placed by the Java producer's default partitioner
 * (murmur2), which is where the scheduler keeps the user's state; all of a
 * user's commands therefore apply in the order they were sent.
 *
 * <pre>{@code
 * try (FollowUps followUps = FollowUps.builder("localhost:9092").build()) {
 *   followUps.onboard("u42", "+14155550142", "America/New_York",
 *       Commands.after("welcome", Duration.ofMinutes(30))).get();
 * }
 * }</pre>
 *
 * <p>Each method returns when the record is handed to the producer; the
 * future completes when the broker acknowledged it (all in-sync replicas),
 * or exceptionally with the producer's error. A client from the
 * {@linkplain #builder builder} gives up after {@link Builder#timeout} (5 s
 * by default) when no broker answers or the topic does not exist, with a
 * {@link TimeoutException} naming the topic, the brokers and the topic
 * prefix. Invalid arguments throw {@link IllegalArgumentException} at once
 * (see {@link Commands}).
 *
 * <p>Safe to use from several threads, like the Kafka producer it wraps.
 * Read what the scheduler publishes with {@link #consumer}.
 */
public final class FollowUps implements AutoCloseable {
  private final Producer<String, Command> producer;
  private final String topic;
  private final Commands commands;
  private final boolean owned;
  /** Where the records go, for errors: the brokers and the topic prefix, if known. */
  private final String where;

  private FollowUps(Producer<String, Command> producer, String topic, Commands commands, boolean owned, String where) {
    this.producer = producer;
    this.topic = topic;
    this.commands = commands;
    this.owned = owned;
    this.where = where;
  }

  /**
   * Wraps a producer you configured yourself (its value serializer must
   * write {@link Command}s, e.g. {@link ProtobufSerializer}). Keep its
   * partitioner the default: ivrsched places keys with murmur2. {@link #close}
   * does not close it.
   *
   * @param producer the producer
   * @param onboarding the onboarding topic, with ivrsched's prefix
   * @param commands builds the commands (its clock stamps them)
   * @return the client
   */
  public static FollowUps wrap(Producer<String, Command> producer, Topic<Command> onboarding, Commands commands) {
    return new FollowUps(Objects.requireNonNull(producer, "producer"), onboarding.name(), Objects.requireNonNull(commands, "commands"), false,
        "the producer's brokers");
  }

  /**
   * Starts configuring a client of the cluster at {@code bootstrapServers}.
   *
   * @param bootstrapServers {@code host:port[,host:port...]}
   * @return the builder
   */
  public static Builder builder(String bootstrapServers) {
    return new Builder(bootstrapServers);
  }

  /**
   * Onboards a user: see {@link Commands#onboard}.
   *
   * @param user the user id
   * @param phone E.164 number, or null to keep the user's
   * @param timeZone IANA time zone, or null to keep the user's
   * @param followUps the follow-ups ({@link Commands#after}, {@link Commands#at})
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> onboard(String user, String phone, String timeZone, FollowUp... followUps) {
    return send(commands.onboard(user, phone, timeZone, followUps));
  }

  /**
   * Cancels all of the user's pending follow-ups: see {@link Commands#cancel(String)}.
   *
   * @param user the user id
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> cancel(String user) {
    return send(commands.cancel(user));
  }

  /**
   * Cancels one follow-up: see {@link Commands#cancel(String, String)}.
   *
   * @param user the user id
   * @param task the task id
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> cancel(String user, String task) {
    return send(commands.cancel(user, task));
  }

  /**
   * Moves a pending follow-up to a due time: see {@link Commands#reschedule(String, String, Instant)}.
   *
   * @param user the user id
   * @param task the task id
   * @param dueAt the new due time
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> reschedule(String user, String task, Instant dueAt) {
    return send(commands.reschedule(user, task, dueAt));
  }

  /**
   * Moves a pending follow-up to a delay from now: see {@link Commands#reschedule(String, String, Duration)}.
   *
   * @param user the user id
   * @param task the task id
   * @param delay the delay from now
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> reschedule(String user, String task, Duration delay) {
    return send(commands.reschedule(user, task, delay));
  }

  /**
   * Erases the user: see {@link Commands#forget}.
   *
   * @param user the user id
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> forget(String user) {
    return send(commands.forget(user));
  }

  /**
   * Sends a command built elsewhere, keyed by its user id.
   *
   * @param command the command
   * @return the record's metadata once acknowledged
   */
  public CompletableFuture<RecordMetadata> send(Command command) {
    if (command.getUserId().isEmpty()) {
      throw new IllegalArgumentException("command has no user id");
    }
    CompletableFuture<RecordMetadata> done = new CompletableFuture<>();
    producer.send(new ProducerRecord<>(topic, command.getUserId(), command), (md, err) -> {
      if (err instanceof TimeoutException) {
        // Kafka says "Topic onboarding not present in metadata after 5000 ms":
        // no broker answered, or none has the topic.
        String why = String.valueOf(err.getMessage()).replaceAll("\\.$", "");
        done.completeExceptionally(new TimeoutException("topic " + topic + " at " + where + ": " + why
            + ". Is Kafka running there, and ivrsched with that --topic-prefix (it creates the topic)?", err));
      } else if (err != null) {
        done.completeExceptionally(err);
      } else {
        done.complete(md);
      }
    });
    return done;
  }

  /** Sends every record handed over so far and waits for their acknowledgements. */
  public void flush() {
    producer.flush();
  }

  /** Sends what is pending and closes the producer (unless it was {@linkplain #wrap wrapped}). */
  @Override
  public void close() {
    if (owned) {
      producer.close();
    } else {
      producer.flush();
    }
  }

  /**
   * Returns a consumer of one of ivrsched's topics, subscribed to it, whose
   * records carry the topic's message type:
   *
   * <pre>{@code
   * try (KafkaConsumer<String, IVRCall> calls = FollowUps.consumer(config, Topic.CALLS)) {
   *   for (ConsumerRecord<String, IVRCall> r : calls.poll(Duration.ofSeconds(1))) {
   *     dial(r.value().getPhone(), r.value().getAction().getIvrScript());
   *   }
   * }
   * }</pre>
   *
   * <p>{@code config} needs {@code bootstrap.servers} and {@code group.id};
   * the key and value deserializers are set here, and
   * {@code auto.offset.reset} defaults to {@code earliest} (a new group
   * reads what is there). Like every Kafka consumer, it is for one thread.
   *
   * @param config consumer properties
   * @param topic the topic, e.g. {@link Topic#CALLS}
   * @param <T> the topic's message type
   * @return the subscribed consumer; close it
   */
  public static <T> KafkaConsumer<String, T> consumer(Map<String, Object> config, Topic<T> topic) {
    Map<String, Object> c = new HashMap<>(config);
    c.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    c.remove(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG);
    c.remove(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG);
    KafkaConsumer<String, T> consumer = new KafkaConsumer<>(c, new StringDeserializer(), topic.deserializer());
    consumer.subscribe(List.of(topic.name()));
    return consumer;
  }

  /**
   * Configures a {@link FollowUps} client. Not safe for concurrent use.
   */
  public static final class Builder {
    /** The producer's default linger.ms (kafka-clients 4). */
    private static final long DEFAULT_LINGER_MS = 5;

    private final Map<String, Object> config = new HashMap<>();
    private Topic<Command> topic = Topic.ONBOARDING;
    private String prefix = "";
    private Clock clock = Clock.systemUTC();
    private Duration timeout = Duration.ofSeconds(5);

    private Builder(String bootstrapServers) {
      config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, Objects.requireNonNull(bootstrapServers, "bootstrap servers"));
      config.put(ProducerConfig.ACKS_CONFIG, "all");
      config.put(ProducerConfig.CLIENT_ID_CONFIG, "ivrsched-java");
    }

    /**
     * Uses ivrsched's {@code --topic-prefix}.
     *
     * @param prefix the prefix
     * @return this builder
     */
    public Builder topicPrefix(String prefix) {
      topic = Topic.ONBOARDING.withPrefix(prefix);
      this.prefix = prefix;
      return this;
    }

    /**
     * Sets how long a send may wait for the cluster (default 5 s): for the
     * onboarding topic's metadata ({@code max.block.ms}: no broker answers,
     * or the topic does not exist, e.g. under a wrong prefix), and then for
     * the acknowledgement ({@code request.timeout.ms}, and
     * {@code delivery.timeout.ms} that plus {@code linger.ms}). Each of
     * these set with {@link #property} wins. Kafka's own default is 60 s.
     *
     * @param timeout a positive duration
     * @return this builder
     */
    public Builder timeout(Duration timeout) {
      if (timeout.isNegative() || timeout.isZero() || timeout.toMillis() > Integer.MAX_VALUE / 2) {
        throw new IllegalArgumentException("timeout " + timeout + ": want a positive duration of at most " + Integer.MAX_VALUE / 2 + " ms");
      }
      this.timeout = timeout;
      return this;
    }

    /**
     * Sets the clock that stamps {@code requested_at} (default: the system clock).
     *
     * @param clock the clock
     * @return this builder
     */
    public Builder clock(Clock clock) {
      this.clock = Objects.requireNonNull(clock, "clock");
      return this;
    }

    /**
     * Sets a Kafka producer property (security settings, say). The
     * serializers are the client's; do not set a partitioner.
     *
     * @param key the property name
     * @param value its value
     * @return this builder
     */
    public Builder property(String key, Object value) {
      config.put(key, value);
      return this;
    }

    /**
     * Creates the client and its producer.
     *
     * @return the client; close it
     */
    public FollowUps build() {
      Map<String, Object> c = new HashMap<>(config);
      c.remove(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG);
      c.remove(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG);
      long ms = timeout.toMillis();
      c.putIfAbsent(ProducerConfig.MAX_BLOCK_MS_CONFIG, ms);
      c.putIfAbsent(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) ms);
      // Kafka requires delivery.timeout.ms >= linger.ms + request.timeout.ms.
      long linger = c.containsKey(ProducerConfig.LINGER_MS_CONFIG)
          ? Long.parseLong(String.valueOf(c.get(ProducerConfig.LINGER_MS_CONFIG))) : DEFAULT_LINGER_MS;
      long request = Long.parseLong(String.valueOf(c.get(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG)));
      c.putIfAbsent(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) Math.min(Integer.MAX_VALUE, linger + request));
      KafkaProducer<String, Command> producer = new KafkaProducer<>(c, new StringSerializer(), new ProtobufSerializer<>());
      return new FollowUps(producer, topic.name(), new Commands(clock), true,
          "brokers " + c.get(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG) + " with topic prefix \"" + prefix + "\"");
    }
  }
}

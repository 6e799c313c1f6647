package dedupe.bench;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorSupplier;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * De-duplication on Kafka Streams, as Kafka Streams users write it: the event-deduplication
 * processor of Confluent's Kafka Streams examples and tutorial ("Deduplicate events ... with Kafka
 * Streams": a persistent RocksDB window store of event id to first-seen time, a record whose id
 * the store holds within the window is dropped). The record key is the id (the benchmark's input
 * is keyed by messageId); values pass through as bytes.
 *
 * <p>Two stores, as Kafka Streams users write this job: BENCH_KSTREAMS_STORE=window (the default)
 * is the tutorial's window store; BENCH_KSTREAMS_STORE=kv is the other pattern of the same
 * tutorials and of the Processor API docs: a persistent key-value store of id to first-seen time,
 * a record dropped while its held time is less than the window before its own, and a wall-clock
 * punctuator that scans the store and deletes the ids first seen before stream time minus the
 * window (the key-value store has no retention of its own).
 *
 * <p>Usage: KStreamsDedup BOOTSTRAP INPUT OUTPUT STATE_DIR APPLICATION_ID. Settings from the
 * environment: BENCH_KSTREAMS_STORE (window or kv), BENCH_KSTREAMS_COMMIT_MS (default 100, the
 * worker's commit interval and Kafka Streams' own default under exactly-once),
 * BENCH_KSTREAMS_THREADS (default 1, Kafka Streams' default), BENCH_KSTREAMS_WINDOW_MS (default 28
 * days, the worker's default window), BENCH_KSTREAMS_CACHE (default 1: the store's record cache
 * on, statestore.cache.max.bytes at Kafka Streams' default of 10 MiB, as the DSL's stores have
 * it; 0: off), BENCH_KSTREAMS_PUNCTUATE_MS (default 60000: the kv store's expiry scan, wall
 * clock).
 */
public final class KStreamsDedup {
  static final String STORE = "seen-ids";

  /**
   * Forwards the first record of each id within the window and drops the rest; the two stores
   * differ only in how they answer "is this a first sighting" ({@link #firstSighting}).
   */
  abstract static class FirstSightings implements FixedKeyProcessor<byte[], byte[], byte[]> {
    final long windowMs;
    FixedKeyProcessorContext<byte[], byte[]> context;

    FirstSightings(long windowMs) {
      this.windowMs = windowMs;
    }

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
      this.context = context;
    }

    /** True (and the id remembered at {@code time}) when no copy is held within the window. */
    abstract boolean firstSighting(byte[] id, long time);

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      byte[] id = record.key();
      if (id == null || firstSighting(id, record.timestamp())) {
        context.forward(record); // a null key is not deduplicable: forwarded as is
      }
    }
  }

  /** The tutorial's window store: a repeat is an id with a sighting within the window. */
  static final class Dedup extends FirstSightings {
    private WindowStore<byte[], Long> seen;

    Dedup(long windowMs) {
      super(windowMs);
    }

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
      super.init(context);
      this.seen = context.getStateStore(STORE);
    }

    @Override
    boolean firstSighting(byte[] id, long time) {
      try (WindowStoreIterator<Long> held = seen.fetch(id, time - windowMs, time + windowMs)) {
        if (held.hasNext()) {
          return false;
        }
      }
      seen.put(id, time, time);
      return true;
    }
  }

  /**
   * A key-value store; a punctuator deletes the ids first seen a window before stream time. Each
   * scan prints "kstreams-dedup: expiry-scan MS SCANNED DELETED" (its duration in ms, ids read,
   * ids deleted).
   */
  static final class KvDedup extends FirstSightings {
    private final long punctuateMs;
    private KeyValueStore<byte[], Long> seen;

    KvDedup(long windowMs, long punctuateMs) {
      super(windowMs);
      this.punctuateMs = punctuateMs;
    }

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
      super.init(context);
      this.seen = context.getStateStore(STORE);
      context.schedule(
          Duration.ofMillis(punctuateMs), PunctuationType.WALL_CLOCK_TIME, now -> expire());
    }

    @Override
    boolean firstSighting(byte[] id, long time) {
      Long held = seen.get(id);
      if (held != null && time - held < windowMs) {
        return false; // a repeat inside the window (a copy older than the first sighting too)
      }
      seen.put(id, time);
      return true;
    }

    private void expire() {
      long streamTime = context.currentStreamTimeMs();
      if (streamTime < 0) {
        return; // no record processed yet
      }
      long cutoff = streamTime - windowMs;
      long started = System.nanoTime();
      long scanned = 0;
      long deleted = 0;
      try (KeyValueIterator<byte[], Long> all = seen.all()) {
        while (all.hasNext()) {
          KeyValue<byte[], Long> held = all.next();
          scanned++;
          if (held.value < cutoff) {
            seen.delete(held.key);
            deleted++;
          }
        }
      }
      long ms = (System.nanoTime() - started) / 1_000_000L;
      System.out.printf("kstreams-dedup: expiry-scan %d %d %d%n", ms, scanned, deleted);
      System.out.flush();
    }
  }

  /**
   * Prints each store partition's restore start and end with a monotonic clock in milliseconds,
   * so that the recovery benchmark (bench/recovery_peers.py) times Kafka Streams' restore from
   * its own events: "kstreams-dedup: restore-start TOPIC-PARTITION MS START END" and
   * "kstreams-dedup: restore-end TOPIC-PARTITION MS RECORDS".
   */
  static final class RestoreLog implements StateRestoreListener {
    private static long nowMs() {
      return System.nanoTime() / 1_000_000L;
    }

    @Override
    public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
      System.out.printf("kstreams-dedup: restore-start %s %d %d %d%n", tp, nowMs(), start, end);
      System.out.flush();
    }

    @Override
    public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long restored) {}

    @Override
    public void onRestoreEnd(TopicPartition tp, String store, long total) {
      System.out.printf("kstreams-dedup: restore-end %s %d %d%n", tp, nowMs(), total);
      System.out.flush();
    }
  }

  private static long env(String name, long fallback) {
    String value = System.getenv(name);
    return value == null || value.isBlank() ? fallback : Long.parseLong(value.trim());
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 5) {
      System.err.println("usage: KStreamsDedup BOOTSTRAP INPUT OUTPUT STATE_DIR APPLICATION_ID");
      System.exit(2);
    }
    long windowMs = env("BENCH_KSTREAMS_WINDOW_MS", Duration.ofDays(28).toMillis());
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[4]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, env("BENCH_KSTREAMS_COMMIT_MS", 100));
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, (int) env("BENCH_KSTREAMS_THREADS", 1));
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    String kind = System.getenv().getOrDefault("BENCH_KSTREAMS_STORE", "window");
    boolean cache = env("BENCH_KSTREAMS_CACHE", 1) != 0;
    long punctuateMs = env("BENCH_KSTREAMS_PUNCTUATE_MS", 60_000);
    StoreBuilder<?> store;
    FixedKeyProcessorSupplier<byte[], byte[], byte[]> dedup;
    if (kind.equals("window")) {
      StoreBuilder<WindowStore<byte[], Long>> windows =
          Stores.windowStoreBuilder(
              Stores.persistentWindowStore(
                  STORE, Duration.ofMillis(windowMs), Duration.ofMillis(windowMs), false),
              Serdes.ByteArray(),
              Serdes.Long());
      store = cache ? windows.withCachingEnabled() : windows;
      dedup = () -> new Dedup(windowMs);
    } else if (kind.equals("kv")) {
      StoreBuilder<KeyValueStore<byte[], Long>> ids =
          Stores.keyValueStoreBuilder(
              Stores.persistentKeyValueStore(STORE), Serdes.ByteArray(), Serdes.Long());
      store = cache ? ids.withCachingEnabled() : ids;
      dedup = () -> new KvDedup(windowMs, punctuateMs);
    } else {
      System.err.println("kstreams-dedup: BENCH_KSTREAMS_STORE must be window or kv: " + kind);
      System.exit(2);
      return;
    }
    System.out.printf("kstreams-dedup: store %s, record cache %s%n", kind, cache ? "on" : "off");

    StreamsBuilder builder = new StreamsBuilder();
    builder.addStateStore(store);
    builder.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .processValues(dedup, STORE)
        .to(args[2], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setGlobalStateRestoreListener(new RestoreLog());
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  // SIGTERM: a clean close commits the open transaction; then exit 0, as the
                  // other contenders do (the JVM's own exit status for SIGTERM is 143).
                  boolean closed = streams.close(Duration.ofSeconds(30));
                  stopped.countDown();
                  Runtime.getRuntime().halt(closed ? 0 : 1);
                }));
    // A client that failed (ERROR) ends the process with status 1, so that a harness sees
    // it instead of waiting for output that never comes.
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.ERROR) {
            System.err.println("kstreams-dedup: the Kafka Streams client failed (ERROR)");
            Runtime.getRuntime().halt(1);
          }
        });
    streams.setUncaughtExceptionHandler(
        exc -> {
          exc.printStackTrace();
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.start();
    stopped.await();
  }
}

// Kafka's own Java client (kafka-clients) against a broker: a list of scenarios run
// in one JVM, each printing one JSON line {"scenario", "ok", "error", "details"}.
//
// Usage: java -cp <this dir>:<kafka-clients and its dependencies> KafkaHarness
//            BOOTSTRAP RUN_ID SCENARIO...
//
// Rules:
// * Each scenario makes its own topics and groups (named from RUN_ID and the
//   scenario), so scenarios share nothing but the broker, and a run can repeat.
// * Each scenario checks what it read against what it wrote (values, keys,
//   headers, offsets, timestamps) and throws on the first difference; the
//   message says what differed. It runs on a thread of its own with a deadline
//   (SCENARIO_DEADLINE_S): a scenario that hangs is reported as failed and the
//   next one starts. -Dharness.parallel=N runs N scenarios at a time (they
//   share nothing but the broker), each line printed as its scenario ends.
// * Standard output carries the JSON lines only (the client's logs go to
//   standard error); the process exits 0 once every scenario has reported.
// * Plain Java 11 against the public client API only: the test compiles this
//   file with javac, no build tool.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.producer.RoundRobinPartitioner;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.SecurityDisabledException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Utils;

public final class KafkaHarness {
    static final long SCENARIO_DEADLINE_S = 90;
    static final Duration WAIT = Duration.ofSeconds(40);
    static final long T0 = 1_700_000_000_000L;
    /** The replication factor of the topics scenarios make (-Dharness.replication). */
    static final short RF = Short.parseShort(System.getProperty("harness.replication", "1"));

    interface Scenario {
        void run(Ctx ctx) throws Exception;
    }

    /** What a scenario has: the broker, names of its own, and details to report. */
    static final class Ctx {
        final String bootstrap;
        final String prefix;
        final Map<String, Object> details = new LinkedHashMap<>();
        final List<AutoCloseable> closing = new ArrayList<>();

        Ctx(String bootstrap, String prefix) {
            this.bootstrap = bootstrap;
            this.prefix = prefix;
        }

        String name(String what) {
            return prefix + "-" + what;
        }

        <T extends AutoCloseable> T closeLater(T thing) {
            closing.add(thing);
            return thing;
        }

        Admin admin() {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
            return closeLater(Admin.create(p));
        }

        KafkaProducer<byte[], byte[]> producer(Object... settings) {
            Map<String, Object> p = new HashMap<>();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30_000);
            p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 20_000);
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
            putAll(p, settings);
            return closeLater(
                    new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer()));
        }

        KafkaConsumer<byte[], byte[]> consumer(Object... settings) {
            Map<String, Object> p = new HashMap<>();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
            putAll(p, settings);
            return closeLater(
                    new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
        }

        void close() {
            Collections.reverse(closing);
            for (AutoCloseable c : closing) {
                try {
                    if (c instanceof KafkaConsumer) {
                        ((KafkaConsumer<?, ?>) c).close(Duration.ofSeconds(5));
                    } else if (c instanceof KafkaProducer) {
                        ((KafkaProducer<?, ?>) c).close(Duration.ofSeconds(5));
                    } else if (c instanceof KafkaShareConsumer) {
                        ((KafkaShareConsumer<?, ?>) c).close(Duration.ofSeconds(5));
                    } else if (c instanceof Admin) {
                        ((Admin) c).close(Duration.ofSeconds(5));
                    } else {
                        c.close();
                    }
                } catch (Exception e) {
                    // closing is best effort: the scenario's outcome is already known
                }
            }
        }
    }

    static void putAll(Map<String, Object> p, Object... settings) {
        for (int i = 0; i < settings.length; i += 2) {
            p.put((String) settings[i], settings[i + 1]);
        }
    }

    // --- checks ---------------------------------------------------------------------------------

    static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    static void eq(Object expected, Object actual, String what) {
        if (!java.util.Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String s(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    static <T> T get(org.apache.kafka.common.KafkaFuture<T> future) throws Exception {
        return future.get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** The cause of a failed future's ExecutionException (what the API threw). */
    static Throwable failure(org.apache.kafka.common.KafkaFuture<?> future) throws Exception {
        try {
            future.get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            return e.getCause();
        }
        throw new AssertionError("expected the call to fail, it succeeded");
    }

    static void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs)
            throws Exception {
        NewTopic t = new NewTopic(topic, partitions, RF);
        if (configs != null) {
            t.configs(configs);
        }
        get(admin.createTopics(List.of(t)).all());
    }

    /**
     * Waits (up to WAIT) until every broker the admin client asks names {@code topic} with
     * {@code partitions} partitions: Admin's Javadoc for createTopics and createPartitions says
     * brokers may learn of a change some time after the call returns, and listTopics and
     * describeTopics may not show it meanwhile (seen on Kafka's three nodes under load).
     */
    static void awaitTopic(Admin admin, String topic, int partitions) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        String seen = "";
        while (true) {
            try {
                boolean listed = get(admin.listTopics().names()).contains(topic);
                int count = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic)
                        .partitions().size();
                if (listed && count == partitions) {
                    return;
                }
                seen = "listed " + listed + ", partitions " + count;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                    throw e;
                }
                seen = "unknown";
            }
            check(System.nanoTime() < deadline, topic + " with " + partitions
                    + " partitions in time: " + seen);
            Thread.sleep(50);
        }
    }

    static List<ConsumerRecord<byte[], byte[]>> readN(
            KafkaConsumer<byte[], byte[]> consumer, int n) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (got.size() < n) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("read " + got.size() + " of " + n + " records in time");
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                got.add(r);
            }
        }
        return got;
    }

    /** Records sent with key k-i, value v-i, headers (i, idx) and timestamp T0+i. */
    static ProducerRecord<byte[], byte[]> numbered(String topic, Integer partition, int i) {
        List<Header> headers = List.of(
                new RecordHeader("i", b(Integer.toString(i))), new RecordHeader("idx", b("h" + i)));
        return new ProducerRecord<>(topic, partition, T0 + i, b("k-" + i), b("v-" + i), headers);
    }

    /** A record read back is the numbered record it claims to be, at the offset it was given. */
    static int checkNumbered(ConsumerRecord<byte[], byte[]> r, Map<Integer, RecordMetadata> sent) {
        String value = s(r.value());
        check(value != null && value.startsWith("v-"), "unexpected value " + value);
        int i = Integer.parseInt(value.substring(2));
        eq("k-" + i, s(r.key()), "key of record " + i);
        eq(T0 + i, r.timestamp(), "timestamp of record " + i);
        eq(TimestampType.CREATE_TIME, r.timestampType(), "timestamp type of record " + i);
        Header[] hs = r.headers().toArray();
        eq(2, hs.length, "header count of record " + i);
        eq("i", hs[0].key(), "first header key");
        eq(Integer.toString(i), s(hs[0].value()), "first header value of record " + i);
        eq("idx", hs[1].key(), "second header key");
        eq("h" + i, s(hs[1].value()), "second header value of record " + i);
        if (sent != null) {
            RecordMetadata m = sent.get(i);
            check(m != null, "record " + i + " read but never acknowledged");
            eq(m.partition(), r.partition(), "partition of record " + i);
            eq(m.offset(), r.offset(), "offset of record " + i);
            eq(m.timestamp(), r.timestamp(), "acknowledged timestamp of record " + i);
        }
        return i;
    }

    /** Every partition of ``topic`` read from the start by a consumer without a group. */
    static List<ConsumerRecord<byte[], byte[]>> readTopic(
            Ctx ctx, String topic, int partitions, int n, Object... settings) {
        KafkaConsumer<byte[], byte[]> c = ctx.consumer(settings);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        c.assign(tps);
        c.seekToBeginning(tps);
        List<ConsumerRecord<byte[], byte[]>> got = readN(c, n);
        // nothing more than what was written
        ConsumerRecords<byte[], byte[]> more = c.poll(Duration.ofMillis(300));
        eq(0, more.count(), "records beyond the " + n + " written");
        return got;
    }

    static void readBackNumbered(
            Ctx ctx, String topic, int partitions, Map<Integer, RecordMetadata> sent) {
        List<ConsumerRecord<byte[], byte[]>> got = readTopic(ctx, topic, partitions, sent.size());
        Set<Integer> seen = new TreeSet<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            check(seen.add(checkNumbered(r, sent)), "record read twice: " + s(r.value()));
        }
        eq(sent.keySet(), seen, "records read back");
    }

    // --- producer -------------------------------------------------------------------------------

    static void producerSync(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        createTopic(ctx.admin(), topic, 2, null);
        KafkaProducer<byte[], byte[]> producer = ctx.producer(ProducerConfig.ACKS_CONFIG, "all");
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 20; i++) {
            RecordMetadata m = producer.send(numbered(topic, i % 2, i)).get(30, TimeUnit.SECONDS);
            eq(i % 2, m.partition(), "partition acknowledged");
            eq((long) (i / 2), m.offset(), "offset acknowledged for record " + i);
            eq(T0 + i, m.timestamp(), "timestamp acknowledged (CreateTime)");
            sent.put(i, m);
        }
        readBackNumbered(ctx, topic, 2, sent);
        // a null key and a null value (a tombstone) round-trip as nulls
        RecordMetadata nulls =
                producer.send(new ProducerRecord<byte[], byte[]>(topic, 0, T0, null, (byte[]) null)).get(30, TimeUnit.SECONDS);
        eq(10L, nulls.offset(), "offset of the tombstone");
        KafkaConsumer<byte[], byte[]> c = ctx.consumer();
        TopicPartition tp = new TopicPartition(topic, 0);
        c.assign(List.of(tp));
        c.seek(tp, nulls.offset());
        ConsumerRecord<byte[], byte[]> r = readN(c, 1).get(0);
        check(r.key() == null && r.value() == null, "null key and value read back as nulls");
        eq(nulls.offset(), r.offset(), "offset of the tombstone");
        ctx.details.put("records", sent.size() + 1);
    }

    static void producerAsyncInterceptor(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        createTopic(ctx.admin(), topic, 3, null);
        CountingInterceptor.reset();
        KafkaProducer<byte[], byte[]> producer = ctx.producer(
                ProducerConfig.INTERCEPTOR_CLASSES_CONFIG, CountingInterceptor.class.getName(),
                ProducerConfig.LINGER_MS_CONFIG, 20);
        Map<Integer, RecordMetadata> sent = new ConcurrentHashMap<>();
        List<String> errors = new CopyOnWriteArrayList<>();
        AtomicInteger callbacks = new AtomicInteger();
        int n = 90;
        for (int i = 0; i < n; i++) {
            final int idx = i;
            producer.send(numbered(topic, null, i), (m, e) -> {
                callbacks.incrementAndGet();
                if (e != null) {
                    errors.add(e.toString());
                } else {
                    sent.put(idx, m);
                }
            });
        }
        producer.flush();
        eq(List.of(), errors, "callback errors");
        eq(n, callbacks.get(), "callbacks called");
        eq(n, CountingInterceptor.sends.get(), "interceptor onSend calls");
        eq(n, CountingInterceptor.acks.get(), "interceptor onAcknowledgement calls");
        eq(0, CountingInterceptor.ackErrors.get(), "interceptor acknowledgements with an error");
        // the interceptor added a header: read it back with the others
        List<ConsumerRecord<byte[], byte[]>> got = readTopic(ctx, topic, 3, n);
        Set<Integer> seen = new TreeSet<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            Header added = r.headers().lastHeader("intercepted");
            check(added != null, "the interceptor's header is missing");
            eq("yes", s(added.value()), "the interceptor's header value");
            r.headers().remove("intercepted");
            check(seen.add(checkNumbered(r, new TreeMap<>(sent))), "record read twice");
            // default partitioner: murmur2 of the key, as every Java client computes it
            int expected = Utils.toPositive(Utils.murmur2(r.key())) % 3;
            eq(expected, r.partition(), "default partitioner's partition for " + s(r.key()));
        }
        eq(n, seen.size(), "records read back");
    }

    /** Adds a header to each record and counts sends and acknowledgements. */
    public static final class CountingInterceptor implements ProducerInterceptor<byte[], byte[]> {
        static final AtomicInteger sends = new AtomicInteger();
        static final AtomicInteger acks = new AtomicInteger();
        static final AtomicInteger ackErrors = new AtomicInteger();

        static void reset() {
            sends.set(0);
            acks.set(0);
            ackErrors.set(0);
        }

        @Override
        public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
            sends.incrementAndGet();
            record.headers().add("intercepted", b("yes"));
            return record;
        }

        @Override
        public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
            acks.incrementAndGet();
            if (exception != null) {
                ackErrors.incrementAndGet();
            }
        }

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }

    static void partitioners(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        int parts = 4;
        // RoundRobinPartitioner: records without a partition spread over every partition
        String rr = ctx.name("rr");
        createTopic(admin, rr, parts, null);
        KafkaProducer<byte[], byte[]> p1 = ctx.producer(
                ProducerConfig.PARTITIONER_CLASS_CONFIG, RoundRobinPartitioner.class.getName());
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 40; i++) {
            sent.put(i, p1.send(numbered(rr, null, i)).get(30, TimeUnit.SECONDS));
        }
        Map<Integer, Integer> perPartition = new TreeMap<>();
        for (RecordMetadata m : sent.values()) {
            perPartition.merge(m.partition(), 1, Integer::sum);
        }
        eq(Map.of(0, 10, 1, 10, 2, 10, 3, 10), perPartition, "round robin: records per partition");
        readBackNumbered(ctx, rr, parts, sent);
        // partitioner.ignore.keys: keyed records still spread (sticky), not hashed
        String ign = ctx.name("ignore-keys");
        createTopic(admin, ign, parts, null);
        KafkaProducer<byte[], byte[]> p2 = ctx.producer(
                ProducerConfig.PARTITIONER_IGNORE_KEYS_CONFIG, true,
                ProducerConfig.BATCH_SIZE_CONFIG, 200);
        Map<Integer, RecordMetadata> sent2 = new TreeMap<>();
        for (int i = 0; i < 40; i++) {
            sent2.put(i, p2.send(numbered(ign, null, i)).get(30, TimeUnit.SECONDS));
        }
        readBackNumbered(ctx, ign, parts, sent2);
        // a partitioner of the application's own: every record to the last partition
        String own = ctx.name("own");
        createTopic(admin, own, parts, null);
        KafkaProducer<byte[], byte[]> p3 = ctx.producer(
                ProducerConfig.PARTITIONER_CLASS_CONFIG, LastPartitioner.class.getName());
        Map<Integer, RecordMetadata> sent3 = new TreeMap<>();
        for (int i = 0; i < 10; i++) {
            RecordMetadata m = p3.send(numbered(own, null, i)).get(30, TimeUnit.SECONDS);
            eq(parts - 1, m.partition(), "custom partitioner's partition");
            eq((long) i, m.offset(), "offset in the last partition");
            sent3.put(i, m);
        }
        readBackNumbered(ctx, own, parts, sent3);
        // records without a key and without a partitioner: the built-in sticky partitioner
        String sticky = ctx.name("sticky");
        createTopic(admin, sticky, parts, null);
        KafkaProducer<byte[], byte[]> p4 = ctx.producer();
        Map<Integer, RecordMetadata> sent4 = new TreeMap<>();
        for (int i = 0; i < 20; i++) {
            ProducerRecord<byte[], byte[]> r = numbered(sticky, null, i);
            sent4.put(i, p4.send(new ProducerRecord<>(sticky, null, r.timestamp(), null, r.value(),
                    r.headers())).get(30, TimeUnit.SECONDS));
        }
        List<ConsumerRecord<byte[], byte[]>> got = readTopic(ctx, sticky, parts, 20);
        for (ConsumerRecord<byte[], byte[]> r : got) {
            int i = Integer.parseInt(s(r.value()).substring(2));
            check(r.key() == null, "null key read back");
            eq(sent4.get(i).offset(), r.offset(), "offset of unkeyed record " + i);
            eq(sent4.get(i).partition(), r.partition(), "partition of unkeyed record " + i);
        }
    }

    /** Sends everything to the topic's last partition. */
    public static final class LastPartitioner implements org.apache.kafka.clients.producer.Partitioner {
        @Override
        public int partition(String topic, Object key, byte[] keyBytes, Object value,
                byte[] valueBytes, org.apache.kafka.common.Cluster cluster) {
            return cluster.partitionCountForTopic(topic) - 1;
        }

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }

    static void compression(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            String topic = ctx.name(codec);
            createTopic(admin, topic, 2, null);
            KafkaProducer<byte[], byte[]> p = ctx.producer(
                    ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                    ProducerConfig.LINGER_MS_CONFIG, 50,
                    ProducerConfig.BATCH_SIZE_CONFIG, 65536);
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                futures.add(p.send(numbered(topic, i % 2, i)));
            }
            Map<Integer, RecordMetadata> sent = new TreeMap<>();
            for (int i = 0; i < futures.size(); i++) {
                sent.put(i, futures.get(i).get(30, TimeUnit.SECONDS));
            }
            readBackNumbered(ctx, topic, 2, sent);
        }
        // a topic whose compression.type differs from the producer's: the broker recompresses
        String topic = ctx.name("topic-gzip");
        createTopic(admin, topic, 1, Map.of("compression.type", "gzip"));
        KafkaProducer<byte[], byte[]> p = ctx.producer(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4", ProducerConfig.LINGER_MS_CONFIG, 20);
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            futures.add(p.send(numbered(topic, 0, i)));
        }
        for (int i = 0; i < futures.size(); i++) {
            sent.put(i, futures.get(i).get(30, TimeUnit.SECONDS));
        }
        readBackNumbered(ctx, topic, 1, sent);
    }

    static void logAppendTime(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        createTopic(ctx.admin(), topic, 1, Map.of("message.timestamp.type", "LogAppendTime"));
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        long before = System.currentTimeMillis();
        RecordMetadata m = p.send(numbered(topic, 0, 1)).get(30, TimeUnit.SECONDS);
        long after = System.currentTimeMillis();
        check(m.timestamp() >= before - 1000 && m.timestamp() <= after + 1000,
                "the broker's append time is acknowledged, not the record's: " + m.timestamp());
        ConsumerRecord<byte[], byte[]> r = readTopic(ctx, topic, 1, 1).get(0);
        eq(TimestampType.LOG_APPEND_TIME, r.timestampType(), "timestamp type read back");
        eq(m.timestamp(), r.timestamp(), "the acknowledged append time read back");
    }

    static void idempotence(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        createTopic(ctx.admin(), topic, 3, null);
        KafkaProducer<byte[], byte[]> p = ctx.producer(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.BATCH_SIZE_CONFIG, 1024,
                ProducerConfig.LINGER_MS_CONFIG, 0);
        int n = 1500;
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            futures.add(p.send(numbered(topic, i % 3, i)));
        }
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < n; i++) {
            RecordMetadata m = futures.get(i).get(30, TimeUnit.SECONDS);
            eq((long) (i / 3), m.offset(), "offset of record " + i + " (in order, no gap)");
            sent.put(i, m);
        }
        readBackNumbered(ctx, topic, 3, sent);
        // the broker knows the producer: DescribeProducers names it with its last sequence
        Admin admin = ctx.admin();
        List<ProducerState> states = get(admin.describeProducers(
                List.of(new TopicPartition(topic, 0))).partitionResult(new TopicPartition(topic, 0)))
                .activeProducers();
        eq(1, states.size(), "active producers on partition 0");
        eq(n / 3 - 1, states.get(0).lastSequence(), "last sequence of the producer on partition 0");
        ctx.details.put("producer_id", states.get(0).producerId());
    }

    static void transactions(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String in = ctx.name("in");
        String out = ctx.name("out");
        String group = ctx.name("g");
        String txnId = ctx.name("txn");
        createTopic(admin, in, 1, null);
        createTopic(admin, out, 2, null);
        KafkaProducer<byte[], byte[]> plain = ctx.producer();
        for (int i = 0; i < 20; i++) {
            plain.send(numbered(in, 0, i)).get(30, TimeUnit.SECONDS);
        }
        KafkaConsumer<byte[], byte[]> c = ctx.consumer(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
        c.subscribe(List.of(in));
        KafkaProducer<byte[], byte[]> tp = ctx.producer(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60_000);
        tp.initTransactions();
        int initEpoch = get(admin.describeTransactions(List.of(txnId)).description(txnId))
                .producerEpoch();
        // a committed transaction: the first 10 input records copied, their offsets committed
        List<ConsumerRecord<byte[], byte[]>> first = readN(c, 10).subList(0, 10);
        tp.beginTransaction();
        List<Future<RecordMetadata>> committed = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : first) {
            int i = Integer.parseInt(s(r.value()).substring(2));
            committed.add(tp.send(numbered(out, i % 2, i)));
        }
        tp.sendOffsetsToTransaction(
                Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(10, "first")),
                c.groupMetadata());
        tp.commitTransaction();
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (Future<RecordMetadata> f : committed) {
            RecordMetadata m = f.get(30, TimeUnit.SECONDS);
            sent.put((int) (m.timestamp() - T0), m);
        }
        // an aborted transaction: 10 more records and an offset commit, all discarded
        tp.beginTransaction();
        for (int i = 100; i < 110; i++) {
            tp.send(numbered(out, i % 2, i));
        }
        tp.sendOffsetsToTransaction(
                Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(20, "aborted")),
                c.groupMetadata());
        tp.flush();
        tp.abortTransaction();
        // transaction version 2 (KIP-890 part 2) bumps the epoch with each of the two;
        // version 1 keeps it
        ctx.details.put("epoch_bumps", get(admin.describeTransactions(List.of(txnId))
                .description(txnId)).producerEpoch() - initEpoch);
        // the group's committed offset is the committed transaction's
        Map<TopicPartition, OffsetAndMetadata> offsets =
                c.committed(Set.of(new TopicPartition(in, 0)), WAIT);
        eq(new OffsetAndMetadata(10, Optional.empty(), "first").offset(),
                offsets.get(new TopicPartition(in, 0)).offset(), "offset committed in the transaction");
        eq("first", offsets.get(new TopicPartition(in, 0)).metadata(), "its metadata");
        // read_committed: the committed transaction's 10 records, nothing aborted
        List<ConsumerRecord<byte[], byte[]>> rc = readTopic(ctx, out, 2, 10,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        Set<Integer> seen = new TreeSet<>();
        for (ConsumerRecord<byte[], byte[]> r : rc) {
            seen.add(checkNumbered(r, sent));
        }
        eq(sent.keySet(), seen, "read_committed records");
        // read_uncommitted: the aborted records too (20 in all; markers take offsets, never read)
        List<ConsumerRecord<byte[], byte[]>> ru = readTopic(ctx, out, 2, 20,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        Set<Integer> all = new TreeSet<>();
        for (ConsumerRecord<byte[], byte[]> r : ru) {
            all.add(checkNumbered(r, null));
        }
        eq(20, all.size(), "read_uncommitted records");
        // two markers per partition: the end offsets count them
        Map<TopicPartition, Long> ends = c.endOffsets(
                List.of(new TopicPartition(out, 0), new TopicPartition(out, 1)));
        eq(12L, ends.get(new TopicPartition(out, 0)), "end offset of out-0 (10 records, 2 markers)");
        eq(12L, ends.get(new TopicPartition(out, 1)), "end offset of out-1");
        // another producer with the transactional id fences this one (KIP-98)
        KafkaProducer<byte[], byte[]> newer = ctx.producer(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        newer.initTransactions();
        Throwable fenced = fencedTransaction(tp, numbered(out, 0, 200), "the older producer");
        newer.beginTransaction();
        newer.send(numbered(out, 0, 300)).get(30, TimeUnit.SECONDS);
        newer.commitTransaction();
        ctx.details.put("fenced", fenced.getClass().getSimpleName());
    }

    /**
     * One transaction of {@code record} by a producer that should be fenced: what it failed
     * with (the cause of a failed send, else the exception of a refused begin or commit),
     * checked to be a fencing: PRODUCER_FENCED under transaction version 1 (Kafka 3.x,
     * a brokerlite cluster); transaction version 2 (Kafka 4, a single brokerlite) bumps the
     * epoch with every transaction and answers INVALID_PRODUCER_EPOCH (KIP-890).
     */
    static Throwable fencedTransaction(KafkaProducer<byte[], byte[]> producer,
            ProducerRecord<byte[], byte[]> record, String who) throws Exception {
        Throwable fenced = null;
        try {
            producer.beginTransaction();
            producer.send(record).get(30, TimeUnit.SECONDS);
            producer.commitTransaction();
        } catch (ExecutionException e) {
            fenced = e.getCause();
        } catch (org.apache.kafka.common.KafkaException e) {
            fenced = e instanceof ProducerFencedException || e.getCause() == null ? e : e.getCause();
        }
        check(fenced instanceof ProducerFencedException
                || fenced instanceof org.apache.kafka.common.errors.InvalidProducerEpochException,
                who + " is fenced: got " + fenced);
        return fenced;
    }

    // --- consumer -------------------------------------------------------------------------------

    /** A rebalance listener that writes down what it was told. */
    static final class Recorder implements ConsumerRebalanceListener {
        final List<String> events = new CopyOnWriteArrayList<>();
        final Set<TopicPartition> owned = ConcurrentHashMap.newKeySet();

        // Empty calls are left out: the classic protocol makes them around every rebalance and
        // the consumer protocol once it joins; what is checked is what moved.
        void note(String what, Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) {
                events.add(what + ":" + sorted(partitions));
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            note("revoked", partitions);
            owned.removeAll(partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            note("assigned", partitions);
            owned.addAll(partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            note("lost", partitions);
            owned.removeAll(partitions);
        }
    }

    static List<String> sorted(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::toString).sorted().collect(Collectors.toList());
    }

    /** Polls every consumer until the group's assignment covers ``all`` once, split between them. */
    static void pollUntilSplit(List<KafkaConsumer<byte[], byte[]>> consumers, Set<TopicPartition> all,
            List<ConsumerRecord<byte[], byte[]>> sink) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            List<Set<TopicPartition>> assigned = new ArrayList<>();
            for (KafkaConsumer<byte[], byte[]> c : consumers) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    sink.add(r);
                }
                assigned.add(c.assignment());
            }
            Set<TopicPartition> union = new HashSet<>();
            int total = 0;
            boolean everyone = true;
            for (Set<TopicPartition> a : assigned) {
                union.addAll(a);
                total += a.size();
                everyone &= !a.isEmpty();
            }
            if (everyone && union.equals(all) && total == all.size()) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the group's assignment did not settle: " + assigned);
            }
        }
    }

    /** The classic protocol's assignors, by the protocol name each joins the group with. */
    static final Map<String, Class<?>> ASSIGNORS = Map.of(
            "range", org.apache.kafka.clients.consumer.RangeAssignor.class,
            "roundrobin", org.apache.kafka.clients.consumer.RoundRobinAssignor.class,
            "sticky", org.apache.kafka.clients.consumer.StickyAssignor.class,
            "cooperative-sticky", org.apache.kafka.clients.consumer.CooperativeStickyAssignor.class);

    static Set<TopicPartition> partitionsOf(String topic, int n) {
        Set<TopicPartition> all = new HashSet<>();
        for (int p = 0; p < n; p++) {
            all.add(new TopicPartition(topic, p));
        }
        return all;
    }

    /** Two members of a group with ``assignor`` (null: the consumer protocol), the second joining
     * later: each partition owned by one member, every record read once by its owner. */
    static void groupOfTwo(Ctx ctx, String assignor, boolean consumerProtocol, boolean pattern)
            throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("g");
        int parts = 4;
        createTopic(ctx.admin(), topic, parts, null);
        Set<TopicPartition> all = partitionsOf(topic, parts);
        List<Object> settings = new ArrayList<>(List.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10_000,
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500));
        if (consumerProtocol) {
            settings = new ArrayList<>(List.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                    ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer"));
        } else {
            settings.addAll(List.of(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                    ASSIGNORS.get(assignor).getName()));
        }
        Recorder first = new Recorder();
        Recorder second = new Recorder();
        KafkaConsumer<byte[], byte[]> c1 = ctx.consumer(settings.toArray());
        KafkaConsumer<byte[], byte[]> c2 = ctx.consumer(settings.toArray());
        subscribe(c1, topic, pattern, consumerProtocol, first);
        List<ConsumerRecord<byte[], byte[]>> early = new ArrayList<>();
        pollUntilSplit(List.of(c1), all, early);
        eq(List.of("assigned:" + sorted(all)), first.events, "first member's listener, alone");
        subscribe(c2, topic, pattern, consumerProtocol, second);
        pollUntilSplit(List.of(c1, c2), all, early);
        eq(0, early.size(), "records read before any was written");
        eq(all.size(), first.owned.size() + second.owned.size(), "partitions the listeners own");
        eq(c1.assignment(), first.owned, "first member: listener agrees with assignment()");
        eq(c2.assignment(), second.owned, "second member: listener agrees with assignment()");
        // what the first member was told to give up
        Set<String> revoked = new TreeSet<>();
        for (String e : first.events) {
            if (e.startsWith("revoked:") || e.startsWith("lost:")) {
                revoked.add(e);
            }
        }
        check(first.events.stream().noneMatch(e -> e.startsWith("lost:")), "no partition lost");
        if ("cooperative-sticky".equals(assignor) || consumerProtocol) {
            // incremental: only what moved to the second member is revoked (KIP-429, KIP-848)
            List<String> expected = List.of("revoked:" + sorted(c2.assignment()));
            eq(expected, new ArrayList<>(revoked), "incremental revocation");
        } else if (assignor != null) {
            // eager: everything is revoked before the rebalance
            check(revoked.contains("revoked:" + sorted(all)), "eager revocation of all: " + first.events);
        }
        // now the records: each read once, by the member that owns its partition
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 40; i++) {
            sent.put(i, p.send(numbered(topic, null, i)).get(30, TimeUnit.SECONDS));
        }
        Map<Integer, KafkaConsumer<byte[], byte[]>> readBy = new HashMap<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (readBy.size() < 40) {
            check(System.nanoTime() < deadline, "read " + readBy.size() + " of 40 in time");
            for (KafkaConsumer<byte[], byte[]> c : List.of(c1, c2)) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    int i = checkNumbered(r, sent);
                    check(readBy.put(i, c) == null, "record " + i + " read twice");
                    check(c.assignment().contains(new TopicPartition(topic, r.partition())),
                            "record " + i + " read by a member that does not own its partition");
                }
            }
        }
        c1.commitSync();
        c2.commitSync();
        // the group as the admin client sees it
        Admin admin = ctx.admin();
        ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group));
        eq(2, d.members().size(), "members described");
        eq(GroupState.STABLE, d.groupState(), "group state");
        eq(consumerProtocol ? GroupType.CONSUMER : GroupType.CLASSIC, d.type(), "group type");
        Set<TopicPartition> described = new HashSet<>();
        for (MemberDescription m : d.members()) {
            described.addAll(m.assignment().topicPartitions());
        }
        eq(all, described, "partitions in the members' described assignments");
        if (!consumerProtocol) {
            eq(assignor, d.partitionAssignor(), "the assignor the group uses");
        }
        Map<TopicPartition, OffsetAndMetadata> offsets =
                get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        Map<TopicPartition, Long> expected = new HashMap<>();
        for (RecordMetadata m : sent.values()) {
            expected.merge(new TopicPartition(topic, m.partition()), m.offset() + 1, Math::max);
        }
        Map<TopicPartition, Long> got = new HashMap<>();
        offsets.forEach((tp, om) -> got.put(tp, om.offset()));
        for (TopicPartition tp : all) {
            expected.putIfAbsent(tp, null);
        }
        expected.values().removeIf(v -> v == null);
        eq(expected, got, "committed offsets, through the admin client");
        ctx.details.put("first_events", first.events);
        ctx.details.put("second_events", second.events);
    }

    static void subscribe(KafkaConsumer<byte[], byte[]> c, String topic, boolean pattern,
            boolean consumerProtocol, ConsumerRebalanceListener listener) {
        if (!pattern) {
            c.subscribe(List.of(topic), listener);
        } else if (consumerProtocol) {
            // KIP-848: the broker matches the regex (RE2J syntax)
            c.subscribe(new SubscriptionPattern(topic.replace(".", "\\.") + ".*"), listener);
        } else {
            c.subscribe(Pattern.compile(Pattern.quote(topic) + ".*"), listener);
        }
    }

    static void manualCommits(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        String group = ctx.name("g");
        createTopic(ctx.admin(), topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 30; i++) {
            sent.put(i, p.send(numbered(topic, 0, i)).get(30, TimeUnit.SECONDS));
        }
        KafkaConsumer<byte[], byte[]> c = ctx.consumer(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
        c.subscribe(List.of(topic));
        List<ConsumerRecord<byte[], byte[]>> got = readN(c, 10);
        ConsumerRecord<byte[], byte[]> last = got.get(9);
        checkNumbered(last, sent);
        // commitSync with metadata and the record's leader epoch, read back with committed()
        OffsetAndMetadata om = new OffsetAndMetadata(last.offset() + 1, last.leaderEpoch(), "sync");
        c.commitSync(Map.of(tp, om));
        OffsetAndMetadata back = c.committed(Set.of(tp), WAIT).get(tp);
        eq(10L, back.offset(), "committed offset read back");
        eq("sync", back.metadata(), "committed metadata read back");
        eq(last.leaderEpoch(), back.leaderEpoch(), "committed leader epoch read back");
        // commitAsync with a callback
        List<ConsumerRecord<byte[], byte[]>> more = readN(c, 10);
        List<Object> outcome = new CopyOnWriteArrayList<>();
        c.commitAsync(Map.of(tp, new OffsetAndMetadata(20, "async")), (offsets, e) -> {
            outcome.add(e == null ? offsets : e);
        });
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (outcome.isEmpty()) {
            check(System.nanoTime() < deadline, "the commitAsync callback in time");
            c.poll(Duration.ofMillis(50));
        }
        eq(Map.of(tp, new OffsetAndMetadata(20, "async")), outcome.get(0), "commitAsync's callback");
        back = c.committed(Set.of(tp), WAIT).get(tp);
        eq(20L, back.offset(), "async commit read back");
        eq("async", back.metadata(), "async metadata read back");
        eq(20L, more.get(more.size() - 1).offset() + 1, "position after 20 records");
        c.close(Duration.ofSeconds(10));
        // a new member of the group starts at the committed offset
        KafkaConsumer<byte[], byte[]> c2 = ctx.consumer(ConsumerConfig.GROUP_ID_CONFIG, group);
        c2.subscribe(List.of(topic));
        ConsumerRecord<byte[], byte[]> next = readN(c2, 1).get(0);
        eq(20L, next.offset(), "a new member resumes at the committed offset");
        checkNumbered(next, sent);
        // committed offsets of a partition never committed: none
        eq(null, c2.committed(Set.of(new TopicPartition(topic, 5)), WAIT)
                .get(new TopicPartition(topic, 5)), "committed() of an unknown partition");
    }

    static void seekAndTimes(Ctx ctx) throws Exception {
        String topic = ctx.name("t");
        createTopic(ctx.admin(), topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 20; i++) {
            // timestamps 10 ms apart: record i at T0 + 10 i
            ProducerRecord<byte[], byte[]> r = numbered(topic, 0, i);
            sent.put(i, p.send(new ProducerRecord<>(topic, 0, T0 + 10L * i, r.key(), r.value(),
                    r.headers())).get(30, TimeUnit.SECONDS));
        }
        KafkaConsumer<byte[], byte[]> c = ctx.consumer();
        c.assign(List.of(tp));
        eq(Map.of(tp, 0L), c.beginningOffsets(List.of(tp)), "beginningOffsets");
        eq(Map.of(tp, 20L), c.endOffsets(List.of(tp)), "endOffsets");
        c.seek(tp, 7);
        eq(7L, c.position(tp), "position after seek");
        ConsumerRecord<byte[], byte[]> r = readN(c, 1).get(0);
        eq(7L, r.offset(), "first record after seek(7)");
        eq("v-7", s(r.value()), "its value");
        c.seekToEnd(List.of(tp));
        eq(20L, c.position(tp), "position after seekToEnd");
        c.seekToBeginning(List.of(tp));
        eq(0L, c.position(tp), "position after seekToBeginning");
        // offsetsForTimes: the first record at or after the time; none past the last
        Map<TopicPartition, OffsetAndTimestamp> at = c.offsetsForTimes(Map.of(tp, T0 + 45));
        eq(5L, at.get(tp).offset(), "offsetsForTimes(T0+45)");
        eq(T0 + 50, at.get(tp).timestamp(), "its timestamp");
        at = c.offsetsForTimes(Map.of(tp, T0 + 50));
        eq(5L, at.get(tp).offset(), "offsetsForTimes at an exact timestamp");
        at = c.offsetsForTimes(Map.of(tp, 0L));
        eq(0L, at.get(tp).offset(), "offsetsForTimes(0)");
        at = c.offsetsForTimes(Map.of(tp, T0 + 1000));
        eq(null, at.get(tp), "offsetsForTimes past the last record");
        // seek to what offsetsForTimes found, and read on from there
        c.seek(tp, c.offsetsForTimes(Map.of(tp, T0 + 151)).get(tp).offset());
        List<ConsumerRecord<byte[], byte[]>> tail = readN(c, 4);
        eq(16L, tail.get(0).offset(), "first record after seeking to T0+151");
        for (ConsumerRecord<byte[], byte[]> x : tail) {
            eq(T0 + 10 * x.offset(), x.timestamp(), "timestamp of offset " + x.offset());
        }
        // deleteRecords moves the log start: beginningOffsets and a reset follow it
        Admin admin = ctx.admin();
        eq(5L, get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(5)))
                .lowWatermarks().get(tp)).lowWatermark(), "low watermark after deleteRecords");
        eq(Map.of(tp, 5L), c.beginningOffsets(List.of(tp)), "beginningOffsets after deleteRecords");
        c.seek(tp, 2); // below the log start: out of range, reset to earliest
        ConsumerRecord<byte[], byte[]> reset = readN(c, 1).get(0);
        eq(5L, reset.offset(), "an out-of-range position resets to the log start");
    }

    // --- KIP-932 share groups ------------------------------------------------------------------

    /**
     * How long the first share delivery may take. Kafka's group coordinator assigns a
     * share-partition only once its share state is initialized, through the share coordinator
     * (on a fresh cluster the first share group also creates __share_group_state: the first
     * heartbeat is answered with no partitions in every run seen, and they come at the next
     * heartbeat, group.share.heartbeat.interval.ms, 5 s). The persister looks for the state's
     * coordinator 5 times (back-off 1 s, doubling: some 15 s); if that fails, the group
     * coordinator tries again after group.share.initialize.retry.interval.ms, 30 s. So a
     * first assignment can come some 50 s after the member joined, which WAIT (40 s) does not
     * cover; the deliveries after the first one must still come within WAIT. (Below
     * SCENARIO_DEADLINE_S, so that a scenario out of time says how far it got.)
     */
    static final Duration FIRST_SHARE_DELIVERY_WAIT = Duration.ofSeconds(65);

    /** The share group's members' assignments as its coordinator describes them. */
    static String shareAssignments(Admin admin, String group) {
        try {
            return admin.describeShareGroups(List.of(group)).describedGroups().get(group)
                    .get(5, TimeUnit.SECONDS).members().stream()
                    .map(m -> m.consumerId() + "=" + m.assignment().topicPartitions())
                    .collect(Collectors.toList()).toString();
        } catch (Exception e) {
            return "not described: " + e;
        }
    }

    static void shareConsumer(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        String group = ctx.name("sg");
        createTopic(admin, topic, 2, null);
        get(admin.incrementalAlterConfigs(Map.of(
                new ConfigResource(ConfigResource.Type.GROUP, group),
                List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                        AlterConfigOp.OpType.SET)))).all());
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        Map<Integer, RecordMetadata> sent = new TreeMap<>();
        for (int i = 0; i < 20; i++) {
            sent.put(i, p.send(numbered(topic, i % 2, i)).get(30, TimeUnit.SECONDS));
        }
        Map<String, Object> settings = new HashMap<>();
        settings.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, ctx.bootstrap);
        settings.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        settings.put("share.acknowledgement.mode", "explicit");
        KafkaShareConsumer<byte[], byte[]> sc = ctx.closeLater(new KafkaShareConsumer<>(
                settings, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
        sc.subscribe(List.of(topic));
        // the first delivery of each record: accept the even ones, release the odd ones
        Map<Integer, Short> firstCount = new TreeMap<>();
        Map<Integer, Short> secondCount = new TreeMap<>();
        long joined = System.nanoTime();
        long deadline = joined + FIRST_SHARE_DELIVERY_WAIT.toNanos();
        while (firstCount.size() < 20 || secondCount.size() < 10) {
            if (System.nanoTime() >= deadline) {
                throw new AssertionError((firstCount.isEmpty() ? "a first share delivery in time"
                        : "share deliveries in time") + ": first " + firstCount + " second "
                        + secondCount + "; assignments " + shareAssignments(admin, group));
            }
            for (ConsumerRecord<byte[], byte[]> r : sc.poll(Duration.ofMillis(200))) {
                if (firstCount.isEmpty()) {
                    ctx.details.put("first_delivery_ms", (System.nanoTime() - joined) / 1_000_000);
                    deadline = System.nanoTime() + WAIT.toNanos();
                }
                int i = checkNumbered(r, sent);
                short count = r.deliveryCount().orElse((short) -1);
                if (!firstCount.containsKey(i)) {
                    firstCount.put(i, count);
                    sc.acknowledge(r, i % 2 == 0 ? AcknowledgeType.ACCEPT : AcknowledgeType.RELEASE);
                } else {
                    check(i % 2 == 1, "accepted record " + i + " delivered again");
                    check(secondCount.put(i, count) == null, "released record delivered thrice");
                    sc.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
            sc.commitSync(Duration.ofSeconds(10)).forEach((tip, err) -> check(err.isEmpty(),
                    "acknowledgement of " + tip + " failed: " + err));
        }
        for (short count : firstCount.values()) {
            eq((short) 1, count, "first delivery count");
        }
        for (short count : secondCount.values()) {
            eq((short) 2, count, "delivery count of a released record");
        }
        ShareGroupDescription d = get(admin.describeShareGroups(List.of(group))
                .describedGroups().get(group));
        eq(1, d.members().size(), "share group members");
        eq(GroupState.STABLE, d.groupState(), "share group state");
        ctx.details.put("delivered", firstCount.size() + secondCount.size());
    }

    // --- admin ----------------------------------------------------------------------------------

    static void adminTopics(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        long t0 = System.nanoTime();
        // validateOnly creates nothing
        get(admin.createTopics(List.of(new NewTopic(topic, 3, RF)),
                new CreateTopicsOptions().validateOnly(true)).all());
        check(!get(admin.listTopics().names()).contains(topic), "validateOnly created the topic");
        var created = admin.createTopics(List.of(new NewTopic(topic, 3, RF)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"))));
        get(created.all());
        eq(3, get(created.numPartitions(topic)), "partitions CreateTopics answered");
        eq((int) RF, get(created.replicationFactor(topic)), "replication factor CreateTopics answered");
        Uuid id = get(created.topicId(topic));
        check(!Uuid.ZERO_UUID.equals(id), "CreateTopics answered a topic id");
        Config answered = get(created.config(topic));
        eq("3600000", answered.get("retention.ms").value(), "retention.ms CreateTopics answered");
        Throwable dup = failure(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        check(dup instanceof TopicExistsException, "creating it again: " + dup);
        // listTopics: ours, without internal topics unless asked
        awaitTopic(admin, topic, 3);
        Map<String, TopicListing> listed = get(admin.listTopics().namesToListings());
        check(listed.containsKey(topic), "listTopics names the topic");
        eq(id, listed.get(topic).topicId(), "listTopics' topic id");
        check(!listed.get(topic).isInternal(), "the topic is not internal");
        // describeTopics by name and by id
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        eq(id, d.topicId(), "described topic id");
        eq(3, d.partitions().size(), "described partitions");
        Collection<Node> nodes = get(admin.describeCluster().nodes());
        for (TopicPartitionInfo info : d.partitions()) {
            eq(RF, (short) info.replicas().size(), "replicas of partition " + info.partition());
            check(nodes.containsAll(info.replicas()), "replicas are nodes: " + info.replicas());
            eq(info.replicas().get(0), info.leader(), "the preferred replica leads " + info.partition());
            eq(new HashSet<>(info.replicas()), new HashSet<>(info.isr()), "isr of " + info.partition());
        }
        TopicDescription byId = get(admin.describeTopics(
                org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id))).allTopicIds()).get(id);
        eq(topic, byId.name(), "a topic described by id");
        Throwable unknown = failure(admin.describeTopics(List.of(ctx.name("missing"))).allTopicNames());
        check(unknown instanceof UnknownTopicOrPartitionException, "describing a missing topic: " + unknown);
        ctx.details.put("described_ms", (System.nanoTime() - t0) / 1_000_000);
        // createPartitions: up, never down
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all());
        awaitTopic(admin, topic, 5);
        Throwable down = failure(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all());
        check(down instanceof InvalidPartitionsException, "shrinking partitions: " + down);
        ctx.details.put("partitions_ms", (System.nanoTime() - t0) / 1_000_000);
        // deleteTopics by name and by id
        String other = ctx.name("other");
        createTopic(admin, other, 1, null);
        get(admin.deleteTopics(List.of(topic)).all());
        Uuid otherId = get(admin.describeTopics(List.of(other)).allTopicNames()).get(other).topicId();
        get(admin.deleteTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(otherId))).all());
        ctx.details.put("deleted_ms", (System.nanoTime() - t0) / 1_000_000);
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            Set<String> names = get(admin.listTopics().names());
            if (!names.contains(topic) && !names.contains(other)) {
                ctx.details.put("unlisted_ms", (System.nanoTime() - t0) / 1_000_000);
                break;
            }
            check(System.nanoTime() < deadline, "deleted topics still listed: " + names);
            Thread.sleep(100);
        }
        Throwable gone = failure(admin.deleteTopics(List.of(topic)).all());
        check(gone instanceof UnknownTopicOrPartitionException, "deleting a deleted topic: " + gone);
    }

    static void adminConfigs(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        createTopic(admin, topic, 1, Map.of("retention.ms", "3600000"));
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = get(admin.describeConfigs(List.of(res)).all()).get(res);
        ConfigEntry retention = config.get("retention.ms");
        eq("3600000", retention.value(), "retention.ms");
        eq(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source(), "its source");
        ConfigEntry segment = config.get("segment.bytes");
        check(segment != null, "segment.bytes described");
        check(segment.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                "segment.bytes is a default: " + segment.source());
        // incrementalAlterConfigs: SET, DELETE, APPEND to a list
        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                        AlterConfigOp.OpType.APPEND)))).all());
        config = get(admin.describeConfigs(List.of(res)).all()).get(res);
        eq("7200000", config.get("retention.ms").value(), "retention.ms after SET");
        eq("200000", config.get("max.message.bytes").value(), "max.message.bytes after SET");
        eq("delete,compact", config.get("cleanup.policy").value(), "cleanup.policy after APPEND");
        get(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                        AlterConfigOp.OpType.SUBTRACT)))).all());
        config = get(admin.describeConfigs(List.of(res)).all()).get(res);
        check(config.get("retention.ms").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                "retention.ms back to its default after DELETE");
        eq("delete", config.get("cleanup.policy").value(), "cleanup.policy after SUBTRACT");
        // an invalid value is refused, and nothing changes
        Throwable bad = failure(admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET))))
                .all());
        check(bad instanceof org.apache.kafka.common.errors.InvalidConfigurationException
                || bad instanceof org.apache.kafka.common.errors.InvalidRequestException,
                "an invalid value: " + bad);
        // the broker's configs
        String nodeId = Integer.toString(get(admin.describeCluster().nodes()).iterator().next().id());
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, nodeId);
        Config bc = get(admin.describeConfigs(List.of(broker)).all()).get(broker);
        for (String key : List.of("log.retention.ms", "num.partitions", "message.max.bytes",
                "auto.create.topics.enable")) {
            check(bc.get(key) != null, "broker config " + key + " described");
        }
        ctx.details.put("broker_configs", bc.entries().size());
    }

    static void adminGroups(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        String group = ctx.name("g");
        createTopic(admin, topic, 2, null);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        for (int i = 0; i < 10; i++) {
            p.send(numbered(topic, i % 2, i)).get(30, TimeUnit.SECONDS);
        }
        // offsets of a group without members, set through the admin client
        get(admin.alterConsumerGroupOffsets(group, Map.of(
                p0, new OffsetAndMetadata(2, "two"), p1, new OffsetAndMetadata(3))).all());
        Map<TopicPartition, OffsetAndMetadata> offsets =
                get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        eq(2L, offsets.get(p0).offset(), "altered offset of partition 0");
        eq("two", offsets.get(p0).metadata(), "its metadata");
        eq(3L, offsets.get(p1).offset(), "altered offset of partition 1");
        // a member starts from them
        KafkaConsumer<byte[], byte[]> c = ctx.consumer(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.CLIENT_ID_CONFIG, "harness-member");
        c.subscribe(List.of(topic));
        List<ConsumerRecord<byte[], byte[]>> got = readN(c, 5);
        Map<Integer, Long> firstOffsets = new TreeMap<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            firstOffsets.putIfAbsent(r.partition(), r.offset());
        }
        eq(Map.of(0, 2L, 1, 3L), firstOffsets, "where the member started");
        // listGroups and describe while it is a member
        Collection<GroupListing> groups = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
        GroupListing listing = groups.stream().filter(g -> g.groupId().equals(group)).findFirst()
                .orElseThrow(() -> new AssertionError("listGroups does not list " + group));
        eq(Optional.of(GroupType.CLASSIC), listing.type(), "listed group type");
        eq("consumer", listing.protocol(), "listed protocol type");
        eq(Optional.of(GroupState.STABLE), listing.groupState(), "listed state");
        ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        eq(1, d.members().size(), "members");
        MemberDescription m = d.members().iterator().next();
        eq("harness-member", m.clientId(), "member's client id");
        eq(Set.of(p0, p1), m.assignment().topicPartitions(), "member's assignment");
        check(!d.isSimpleConsumerGroup(), "a subscribing group is not simple");
        // while it has a member: deleting the group fails, and so do offsets of its topic
        Throwable busy = failure(admin.deleteConsumerGroups(List.of(group)).all());
        check(busy instanceof org.apache.kafka.common.errors.GroupNotEmptyException,
                "deleting a group with members: " + busy);
        Throwable subscribed = failure(admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all());
        check(subscribed instanceof org.apache.kafka.common.errors.GroupSubscribedToTopicException,
                "deleting offsets of a subscribed topic: " + subscribed);
        // remove the member (KIP-345's admin call), then delete offsets and the group
        get(admin.removeMembersFromConsumerGroup(group,
                new org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions()).all());
        d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        eq(0, d.members().size(), "members after removing them");
        eq(GroupState.EMPTY, d.groupState(), "state after removing the members");
        get(admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all());
        offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        eq(Set.of(p1), offsets.keySet(), "offsets left after deleting partition 0's");
        get(admin.deleteConsumerGroups(List.of(group)).all());
        // a deleted group: GROUP_ID_NOT_FOUND from DescribeGroups v6 (KIP-1043: Kafka 4.x,
        // brokerlite); a broker serving v5 at most (Kafka 3.9) describes it as Dead
        try {
            d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
            eq(GroupState.DEAD, d.groupState(), "a deleted group's state");
            eq(0, d.members().size(), "a deleted group's members");
            ctx.details.put("deleted_group", "Dead");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException,
                    "describing a deleted group: " + e.getCause());
            ctx.details.put("deleted_group", "GroupIdNotFoundException");
        }
    }

    static void adminOffsetsAndCluster(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        createTopic(admin, topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]> p = ctx.producer();
        long[] stamps = {T0 + 30, T0 + 10, T0 + 50, T0 + 20};
        for (int i = 0; i < stamps.length; i++) {
            ProducerRecord<byte[], byte[]> r = numbered(topic, 0, i);
            p.send(new ProducerRecord<>(topic, 0, stamps[i], r.key(), r.value())).get(30, TimeUnit.SECONDS);
        }
        ListOffsetsResult.ListOffsetsResultInfo earliest =
                get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp));
        eq(0L, earliest.offset(), "earliest");
        eq(4L, get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp)).offset(),
                "latest");
        ListOffsetsResult.ListOffsetsResultInfo max =
                get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp));
        eq(2L, max.offset(), "max timestamp's offset (KIP-734)");
        eq(T0 + 50, max.timestamp(), "max timestamp");
        ListOffsetsResult.ListOffsetsResultInfo byTime =
                get(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(T0 + 25))).partitionResult(tp));
        eq(0L, byTime.offset(), "first offset whose timestamp is at or after T0+25");
        eq(T0 + 30, byTime.timestamp(), "its timestamp");
        // describeCluster
        DescribeClusterResult cluster = admin.describeCluster();
        Collection<Node> nodes = get(cluster.nodes());
        check(!nodes.isEmpty(), "describeCluster names nodes");
        String clusterId = get(cluster.clusterId());
        check(clusterId != null && !clusterId.isEmpty(), "a cluster id");
        Node controller = get(cluster.controller());
        check(nodes.contains(controller), "the controller is one of the nodes: " + controller);
        // features (KIP-584): group.version and share.version finalized; validateOnly changes nothing
        FeatureMetadata features = get(admin.describeFeatures().featureMetadata());
        check(features.finalizedFeatures().containsKey("group.version"),
                "group.version finalized: " + features);
        eq((short) 1, features.finalizedFeatures().get("group.version").maxVersionLevel(),
                "group.version level");
        get(admin.updateFeatures(Map.of("group.version",
                new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)),
                new UpdateFeaturesOptions().validateOnly(true)).all());
        Throwable tooHigh = failure(admin.updateFeatures(Map.of("group.version",
                new FeatureUpdate((short) 99, FeatureUpdate.UpgradeType.UPGRADE))).all());
        check(tooHigh instanceof org.apache.kafka.common.errors.InvalidUpdateVersionException,
                "a level past the supported: " + tooHigh);
        // log dirs: the partition, with its size on disk
        List<Integer> ids = nodes.stream().map(Node::id).collect(Collectors.toList());
        Map<Integer, Map<String, LogDirDescription>> dirs =
                get(admin.describeLogDirs(ids).allDescriptions());
        int holders = 0;
        for (int id : ids) {
            Map<String, LogDirDescription> ours = dirs.get(id);
            eq(1, ours.size(), "log dirs of node " + id);
            LogDirDescription dir = ours.values().iterator().next();
            eq(null, dir.error(), "the log dir's error");
            ReplicaInfo info = dir.replicaInfos().get(tp);
            if (info != null) {
                holders++;
                check(info.size() > 0, "its size: " + info.size());
                check(!info.isFuture(), "not a future replica");
            }
        }
        eq((int) RF, holders, "log dirs holding the partition");
        // ACLs: without an authorizer, Kafka answers SECURITY_DISABLED
        Throwable acls = failure(admin.describeAcls(AclBindingFilter.ANY).values());
        check(acls instanceof SecurityDisabledException, "describeAcls without an authorizer: " + acls);
        ctx.details.put("cluster_id", clusterId);
    }

    static void adminTransactions(Ctx ctx) throws Exception {
        Admin admin = ctx.admin();
        String topic = ctx.name("t");
        String txnId = ctx.name("txn");
        createTopic(admin, topic, 1, null);
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<byte[], byte[]> tp1 = ctx.producer(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 50_000);
        tp1.initTransactions();
        tp1.beginTransaction();
        RecordMetadata m = tp1.send(numbered(topic, 0, 0)).get(30, TimeUnit.SECONDS);
        // an open transaction, as listTransactions, describeTransactions and describeProducers see it
        Collection<TransactionListing> listed = get(admin.listTransactions().all());
        TransactionListing ours = listed.stream().filter(t -> t.transactionalId().equals(txnId))
                .findFirst().orElseThrow(() -> new AssertionError("listTransactions: " + listed));
        eq(TransactionState.ONGOING, ours.state(), "listed state");
        TransactionDescription d = get(admin.describeTransactions(List.of(txnId)).description(txnId));
        eq(TransactionState.ONGOING, d.state(), "described state");
        eq(ours.producerId(), d.producerId(), "described producer id");
        eq(50_000L, d.transactionTimeoutMs(), "described timeout");
        eq(Set.of(tp), d.topicPartitions(), "described partitions");
        check(d.transactionStartTimeMs().isPresent(), "a start time");
        List<ProducerState> states =
                get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
        eq(1, states.size(), "active producers");
        eq(d.producerId(), states.get(0).producerId(), "the producer's id");
        eq(d.producerEpoch(), states.get(0).producerEpoch(), "the producer's epoch");
        eq(java.util.OptionalLong.of(m.offset()), states.get(0).currentTransactionStartOffset(),
                "the open transaction's first offset");
        tp1.commitTransaction();
        // the markers are written after the commit is answered: PrepareCommit, then CompleteCommit
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            d = get(admin.describeTransactions(List.of(txnId)).description(txnId));
            if (d.state() != TransactionState.PREPARE_COMMIT) {
                break;
            }
            check(System.nanoTime() < deadline, "the transaction still PrepareCommit");
            Thread.sleep(50);
        }
        eq(TransactionState.COMPLETE_COMMIT, d.state(), "state after commit");
        eq(Set.of(), d.topicPartitions(), "partitions after commit");
        Collection<TransactionListing> ongoing = get(admin.listTransactions(
                new org.apache.kafka.clients.admin.ListTransactionsOptions()
                        .filterStates(Set.of(TransactionState.ONGOING))).all());
        check(ongoing.stream().noneMatch(t -> t.transactionalId().equals(txnId)),
                "a committed transaction is not listed as ongoing");
        // fenceProducers (KIP-618's admin call): the producer is fenced
        get(admin.fenceProducers(List.of(txnId)).all());
        Throwable fenced = fencedTransaction(tp1, numbered(topic, 0, 1), "the fenced producer");
        ctx.details.put("fenced", String.valueOf(fenced));
    }

    /**
     * Reads partition 0 of -Dharness.topic from offset 0, assigned (no group), until
     * -Dharness.count records arrived, with metadata.max.age.ms past the deadline: what
     * the test does to the cluster meanwhile (a leader moved) it must follow without a
     * periodic refresh. Details: the values read, in order.
     */
    static void readTopic(Ctx ctx) throws Exception {
        String topic = System.getProperty("harness.topic");
        int count = Integer.parseInt(System.getProperty("harness.count", "0"));
        KafkaConsumer<byte[], byte[]> consumer =
                ctx.consumer(ConsumerConfig.METADATA_MAX_AGE_CONFIG, 900_000);
        TopicPartition tp = new TopicPartition(topic, 0);
        consumer.assign(List.of(tp));
        consumer.seek(tp, 0);
        List<String> values = new ArrayList<>();
        ctx.details.put("values", values);
        while (values.size() < count) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                values.add(new String(r.value(), StandardCharsets.UTF_8));
            }
        }
    }

    // --- the run --------------------------------------------------------------------------------

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("producer_sync", KafkaHarness::producerSync);
        SCENARIOS.put("producer_async_interceptor", KafkaHarness::producerAsyncInterceptor);
        SCENARIOS.put("partitioners", KafkaHarness::partitioners);
        SCENARIOS.put("compression", KafkaHarness::compression);
        SCENARIOS.put("log_append_time", KafkaHarness::logAppendTime);
        SCENARIOS.put("idempotence", KafkaHarness::idempotence);
        SCENARIOS.put("transactions", KafkaHarness::transactions);
        for (String a : List.of("range", "roundrobin", "sticky", "cooperative-sticky")) {
            SCENARIOS.put("group_" + a.replace('-', '_'), ctx -> groupOfTwo(ctx, a, false, false));
        }
        SCENARIOS.put("group_pattern", ctx -> groupOfTwo(ctx, "cooperative-sticky", false, true));
        SCENARIOS.put("group_protocol_consumer", ctx -> groupOfTwo(ctx, null, true, false));
        SCENARIOS.put("group_protocol_consumer_pattern", ctx -> groupOfTwo(ctx, null, true, true));
        SCENARIOS.put("manual_commits", KafkaHarness::manualCommits);
        SCENARIOS.put("seek_and_times", KafkaHarness::seekAndTimes);
        SCENARIOS.put("share_consumer", KafkaHarness::shareConsumer);
        SCENARIOS.put("admin_topics", KafkaHarness::adminTopics);
        SCENARIOS.put("admin_configs", KafkaHarness::adminConfigs);
        SCENARIOS.put("admin_groups", KafkaHarness::adminGroups);
        SCENARIOS.put("admin_offsets_cluster", KafkaHarness::adminOffsetsAndCluster);
        SCENARIOS.put("admin_transactions", KafkaHarness::adminTransactions);
        SCENARIOS.put("read_topic", KafkaHarness::readTopic);
    }

    static String json(Object o) {
        if (o == null) {
            return "null";
        }
        if (o instanceof Boolean || o instanceof Number) {
            return o.toString();
        }
        if (o instanceof Map) {
            return ((Map<?, ?>) o).entrySet().stream()
                    .map(e -> json(String.valueOf(e.getKey())) + ":" + json(e.getValue()))
                    .collect(Collectors.joining(",", "{", "}"));
        }
        if (o instanceof Collection) {
            return ((Collection<?>) o).stream().map(KafkaHarness::json)
                    .collect(Collectors.joining(",", "[", "]"));
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') {
                sb.append('\\').append(ch);
            } else if (ch < 0x20) {
                sb.append(String.format("\\u%04x", (int) ch));
            } else {
                sb.append(ch);
            }
        }
        return sb.append('"').toString();
    }

    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder(t.toString());
        String at = Arrays.stream(t.getStackTrace())
                .filter(e -> e.getClassName().startsWith("KafkaHarness")
                        && !e.getMethodName().startsWith("lambda$"))
                .limit(3)
                .map(e -> e.getMethodName() + ":" + e.getLineNumber())
                .collect(Collectors.joining(" < "));
        if (!at.isEmpty()) {
            sb.append(" at ").append(at);
        }
        Throwable cause = t.getCause();
        while (cause != null && cause != t) {
            sb.append(" / caused by ").append(cause);
            t = cause;
            cause = cause.getCause();
        }
        return sb.toString();
    }

    /** One scenario run on a thread of its own, within its deadline: its JSON line. */
    static String runOne(String bootstrap, String runId, String name) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("scenario", name);
        Scenario scenario = SCENARIOS.get(name);
        Ctx ctx = new Ctx(bootstrap, runId + "-" + name.replace('_', '-'));
        long start = System.nanoTime();
        if (scenario == null) {
            line.put("ok", false);
            line.put("error", "unknown scenario; known: " + SCENARIOS.keySet());
        } else {
            ExecutorService one = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "scenario-" + name);
                t.setDaemon(true);
                return t;
            });
            Future<?> run = one.submit(() -> {
                try {
                    scenario.run(ctx);
                } finally {
                    ctx.close();
                }
                return null;
            });
            try {
                run.get(SCENARIO_DEADLINE_S, TimeUnit.SECONDS);
                line.put("ok", true);
            } catch (ExecutionException e) {
                line.put("ok", false);
                line.put("error", describe(e.getCause()));
            } catch (InterruptedException e) {
                line.put("ok", false);
                line.put("error", "interrupted");
            } catch (TimeoutException e) {
                run.cancel(true);
                line.put("ok", false);
                line.put("error", "no outcome within " + SCENARIO_DEADLINE_S + " s");
            }
            one.shutdownNow();
        }
        line.put("seconds", Math.round((System.nanoTime() - start) / 1e7) / 100.0);
        line.put("details", ctx.details);
        return json(line);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String runId = args[1];
        List<String> names = Arrays.asList(args).subList(2, args.length);
        // -Dharness.parallel=N: N scenarios at a time (they share nothing but the
        // broker), each line printed as its scenario ends; 1: in the order given.
        int parallel = Math.max(1, Integer.getInteger("harness.parallel", 1));
        ExecutorService pool = Executors.newFixedThreadPool(parallel, r -> {
            Thread t = new Thread(r, "scenarios");
            t.setDaemon(true);
            return t;
        });
        List<Future<?>> running = new ArrayList<>();
        for (String name : names) {
            running.add(pool.submit(() -> {
                String line = runOne(bootstrap, runId, name);
                synchronized (System.out) {
                    System.out.println(line);
                    System.out.flush();
                }
            }));
        }
        for (Future<?> f : running) {
            f.get();
        }
        pool.shutdown();
        System.exit(0);
    }
}

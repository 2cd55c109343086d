// Kafka's Java producer for trafka's KIP-951 tests (tests/proxy/produce_hints.py),
// compiled by the tests with javac against kafka-clients; nothing of it is built
// into the repository.
//
//   java HintedProducers TOPIC N TXN_PREFIX WAY=BROKERS...
//
// Three producers in this JVM per WAY (plain, idempotent, transactional; client
// id "WAY-java-MODE"), acks=all, metadata.max.age.ms 15 minutes. Each sends N
// records "WAY-java-MODE-before-<i>"
// to partition 0 and waits for their delivery (the transactional one in a
// committed transaction); then the JVM prints "ready" and waits for a line on
// its standard input (the test moved the partition's leader meanwhile). Each
// then sends N records "WAY-java-MODE-after-<i>" the same way. One line
// "VALUE OFFSET" per delivery report, "ok" at the end. Exits 1 on any error.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class HintedProducers {
    static final String[] MODES = {"plain", "idempotent", "transactional"};

    public static void main(String[] args) throws Exception {
        String topic = args[0], txnPrefix = args[2];
        int n = Integer.parseInt(args[1]);
        List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
        List<String> names = new ArrayList<>();
        try {
            for (int w = 3; w < args.length; w++) {
                int eq = args[w].indexOf('=');
                String way = args[w].substring(0, eq), brokers = args[w].substring(eq + 1);
                for (String mode : MODES) {
                    String name = way + "-java-" + mode;
                    names.add(name);
                    producers.add(open(brokers, name, mode, txnPrefix + "-" + name));
                }
            }
            send(producers, names, topic, n, "before");
            System.out.println("ready");
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            if (in.readLine() == null) {
                throw new IllegalStateException("standard input closed before the move");
            }
            send(producers, names, topic, n, "after");
            System.out.println("ok");
            System.out.flush();
        } finally {
            for (KafkaProducer<byte[], byte[]> p : producers) {
                p.close(java.time.Duration.ofSeconds(10));
            }
        }
    }

    static KafkaProducer<byte[], byte[]> open(String brokers, String name, String mode, String txnId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, name);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "900000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "90000");
        // A request behind a Metadata request the test holds waits this long.
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, mode.equals("plain") ? "false" : "true");
        if (mode.equals("plain")) {
            // Else a batch the former leader refused, sent again, may land after the
            // next ones (max.in.flight.requests.per.connection without idempotence).
            props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
        }
        if (mode.equals("transactional")) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        }
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
        if (mode.equals("transactional")) {
            producer.initTransactions();
        }
        return producer;
    }

    static void send(
        List<KafkaProducer<byte[], byte[]>> producers, List<String> names, String topic, int n,
        String phase
    ) throws Exception {
        List<String> values = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int m = 0; m < producers.size(); m++) {
            KafkaProducer<byte[], byte[]> producer = producers.get(m);
            boolean txn = names.get(m).endsWith("-transactional");
            if (txn) {
                producer.beginTransaction();
            }
            for (int i = 0; i < n; i++) {
                String value = names.get(m) + "-" + phase + "-" + i;
                values.add(value);
                futures.add(producer.send(new ProducerRecord<>(
                    topic, 0, null, value.getBytes(StandardCharsets.UTF_8))));
            }
            if (txn) {
                producer.commitTransaction();
            }
        }
        for (KafkaProducer<byte[], byte[]> p : producers) {
            p.flush();
        }
        for (int i = 0; i < values.size(); i++) {
            System.out.println(values.get(i) + " " + futures.get(i).get().offset());
        }
        System.out.flush();
    }
}

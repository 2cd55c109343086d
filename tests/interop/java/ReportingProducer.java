// Kafka's Java producer for trafka's interop tests, compiled by the tests with
// javac against kafka-clients (tests/kafka_peers.py's jars); nothing of it is
// built into the repository.
//
//   java ReportingProducer BROKERS TOPIC N PREFIX MODES [TXN_ID] [NAME=VALUE...]
//
// MODES: plain, idempotent or transactional, or several joined by commas, run
// one after the other in this JVM, each with a producer of its own. Sends N
// records (key "key-<i % 29>", value "PREFIX-<i>"; with several modes
// "PREFIX-<mode>-<i>"), every one to the partition librdkafka's CRC32 would
// choose (not Java's murmur2); prints "VALUE PARTITION OFFSET" per delivery
// report, then "ok N" once at the end. Transactional: three transactions of N
// records each, the second aborted (values "<prefix>-aborted-<i>", delivered
// before the abort, not printed), the third's values "<prefix>-again-<i>".
// Trailing NAME=VALUE arguments are more client properties (TLS settings...),
// set last. Exits 1 on any error.
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.zip.CRC32;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ReportingProducer {
    public static void main(String[] args) throws Exception {
        String brokers = args[0], topic = args[1], prefix = args[3];
        String[] modes = args[4].split(",");
        int n = Integer.parseInt(args[2]);
        String txnId = null;
        Properties extra = new Properties();
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) {
                extra.put(args[i].substring(0, eq), args[i].substring(eq + 1));
            } else if (i == 5) {
                txnId = args[i];
            } else {
                throw new IllegalArgumentException("not NAME=VALUE: " + args[i]);
            }
        }
        for (String mode : modes) {
            String named = modes.length == 1 ? prefix : prefix + "-" + mode;
            produce(brokers, topic, n, named, mode, txnId, extra);
        }
        System.out.println("ok " + n);
    }

    static void produce(
        String brokers, String topic, int n, String prefix, String mode, String txnId, Properties extra
    ) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, mode.equals("plain") ? "false" : "true");
        if (mode.equals("plain")) {
            props.put(ProducerConfig.ACKS_CONFIG, "1");
        } else if (!mode.equals("idempotent") && !mode.equals("transactional")) {
            throw new IllegalArgumentException("not a mode: " + mode);
        }
        boolean transactional = mode.equals("transactional");
        if (transactional) {
            if (txnId == null) {
                throw new IllegalArgumentException("transactional needs TXN_ID");
            }
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        }
        props.putAll(extra);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            int partitions = producer.partitionsFor(topic).size();
            if (transactional) {
                producer.initTransactions();
            }
            String[] rounds = transactional
                ? new String[] {prefix, prefix + "-aborted", prefix + "-again"}
                : new String[] {prefix};
            for (String round : rounds) {
                if (transactional) {
                    producer.beginTransaction();
                }
                List<String> values = new ArrayList<>();
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    byte[] key = ("key-" + (i % 29)).getBytes("UTF-8");
                    String value = round + "-" + i;
                    CRC32 crc = new CRC32();
                    crc.update(key);
                    int partition = (int) (crc.getValue() % partitions);
                    values.add(value);
                    sent.add(producer.send(new ProducerRecord<>(topic, partition, key, value.getBytes("UTF-8"))));
                }
                producer.flush();
                boolean abort = round.endsWith("-aborted");
                for (int i = 0; i < n; i++) {
                    RecordMetadata m = sent.get(i).get();
                    long offset = m.hasOffset() ? m.offset() : -1;
                    if (!abort) {
                        System.out.println(values.get(i) + " " + m.partition() + " " + offset);
                    }
                }
                if (abort) {
                    producer.abortTransaction();
                } else if (transactional) {
                    producer.commitTransaction();
                }
            }
        }
    }
}

// Kafka's Java producer for trafka's interop tests, compiled by the tests with
// javac against kafka-clients (tests/kafka_peers.py's jars); nothing of it is
// built into the repository.
//
//   java ReportingProducer BROKERS TOPIC N PREFIX plain|idempotent|transactional [TXN_ID]
//
// Sends N records (key "key-<i % 29>", value "PREFIX-<i>"), every one to the
// partition librdkafka's CRC32 would choose (not Java's murmur2); prints
// "VALUE PARTITION OFFSET" per delivery report, then "ok N". Transactional:
// three transactions of N records each, the second aborted (values
// "PREFIX-aborted-<i>", delivered before the abort, not printed), the third's
// values "PREFIX-again-<i>". Exits 1 on any error.
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
        String brokers = args[0], topic = args[1], prefix = args[3], mode = args[4];
        int n = Integer.parseInt(args[2]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, mode.equals("plain") ? "false" : "true");
        if (mode.equals("plain")) {
            props.put(ProducerConfig.ACKS_CONFIG, "1");
        }
        boolean transactional = mode.equals("transactional");
        if (transactional) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[5]);
        }
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
        System.out.println("ok " + n);
    }
}

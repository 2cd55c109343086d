// Kafka's Java client as the transactional processor of trafka's fault tests
// (tests/faults/txn_clients.py), compiled by the tests with javac against
// kafka-clients; nothing of it is built into the repository.
//
//   java TxnProcessor BROKERS SOURCE SINK GROUP SEED ABORT_RATIO STOP_FILE
//
// A read_committed consumer of SOURCE in GROUP; per poll (at most 20 records) one
// transaction writing "t<n>:<partition>:<offset>:<value>" per input to SINK (the
// input's key), the positions sent with the group's metadata, then a commit, or
// (a seeded ABORT_RATIO of them) a flush and an abort. After an abort or an error
// the consumer goes back to the group's committed offsets; after a fatal error or
// a commit that did not return, a new producer with the same transactional.id.
// Prints one JSON line per event: {"producer":1}, {"error":"<class>"},
// {"txn":n,"outputs":[...],"offsets":{...}} when a transaction begins and
// {"txn":n,"outcome":"committed|aborted|unknown","reports":{...}} when it ends.
// Stops when STOP_FILE exists.
import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProcessor {
    static String brokers, source, sink, group;
    static double abortRatio;
    static File stop;
    static Random rng;
    static int count = 0;

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String str(byte[] b) {
        return new String(b, java.nio.charset.StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        brokers = args[0];
        source = args[1];
        sink = args[2];
        group = args[3];
        rng = new Random(Long.parseLong(args[4]));
        abortRatio = Double.parseDouble(args[5]);
        stop = new File(args[6]);
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(source));
            while (!stop.exists()) {
                producerLife(consumer);
            }
        }
    }

    static void producerLife(KafkaConsumer<byte[], byte[]> consumer) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "tx-" + group);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "15000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        say("{\"producer\":1}");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            try {
                producer.initTransactions();
                rewind(consumer);
                while (!stop.exists()) {
                    if (!transaction(consumer, producer)) {
                        break;
                    }
                }
            } catch (Exception e) {
                error(e);
            } finally {
                producer.close(Duration.ofSeconds(5));
            }
        }
    }

    static void error(Exception e) {
        say("{\"error\":\"" + e.getClass().getSimpleName() + "\"}");
    }

    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        var assigned = consumer.assignment();
        if (assigned.isEmpty()) {
            return;
        }
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }

    static void end(int n, String outcome, String reports) {
        say("{\"txn\":" + n + ",\"outcome\":\"" + outcome + "\"" + reports + "}");
    }

    static boolean transaction(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer) {
        List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();
        consumer.poll(Duration.ofMillis(300)).forEach(records::add);
        if (records.isEmpty()) {
            return true;
        }
        int n = count++;
        List<String> outputs = new ArrayList<>();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        StringBuilder line = new StringBuilder("{\"txn\":" + n + ",\"outputs\":[");
        for (ConsumerRecord<byte[], byte[]> r : records) {
            String out = "t" + n + ":" + r.partition() + ":" + r.offset() + ":" + str(r.value());
            line.append(outputs.isEmpty() ? "" : ",").append('"').append(out).append('"');
            outputs.add(out);
            TopicPartition tp = new TopicPartition(r.topic(), r.partition());
            long next = r.offset() + 1;
            if (!offsets.containsKey(tp) || offsets.get(tp).offset() < next) {
                offsets.put(tp, new OffsetAndMetadata(next));
            }
        }
        line.append("],\"offsets\":{");
        String sep = "";
        for (var e : offsets.entrySet()) {
            line.append(sep).append("\"").append(e.getKey().partition()).append("\":").append(e.getValue().offset());
            sep = ",";
        }
        say(line.append("}}").toString());
        boolean abort = rng.nextDouble() < abortRatio;
        boolean committing = false;
        try {
            producer.beginTransaction();
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < records.size(); i++) {
                byte[] value = outputs.get(i).getBytes(java.nio.charset.StandardCharsets.UTF_8);
                sent.add(producer.send(new ProducerRecord<>(sink, records.get(i).key(), value)));
            }
            producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            if (abort) {
                producer.flush();
            } else {
                committing = true;
                producer.commitTransaction();
                StringBuilder reports = new StringBuilder(",\"reports\":{");
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata m = sent.get(i).get();
                    reports.append(i == 0 ? "" : ",").append('"').append(outputs.get(i)).append("\":[")
                        .append(m.partition()).append(',').append(m.hasOffset() ? m.offset() : -1).append(']');
                }
                end(n, "committed", reports.append('}').toString());
                return true;
            }
        } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                 | UnsupportedVersionException e) {
            error(e);
            end(n, committing ? "unknown" : "aborted", "");
            return false;
        } catch (Exception e) {
            error(e);
        }
        try {
            producer.abortTransaction();
        } catch (KafkaException e) {
            error(e);
            end(n, committing ? "unknown" : "aborted", "");
            return false;
        }
        end(n, "aborted", "");
        rewind(consumer);
        return true;
    }
}

// The Java driver's state and helpers: the settings it was opened with, its producer and
// consumer, what the history saw it read; and which errors are certain (docs/design.md,
// "The client protocol"). The op classes extend it: Sends, Reads, Transactions, KchaosDriver.
// process, node and the op's fields.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.errors.InvalidRequiredAcksException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.RecordBatchTooLargeException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;

abstract class DriverState {
    static final String OK = "ok", FAIL = "fail", INFO = "info";
    static final ObjectMapper JSON = new ObjectMapper();

    // Delivery errors that mean the message is certainly not in the log (workloads/classify.py's list, in Java's names).
    static boolean certainNotWritten(Throwable e) {
        return e instanceof UnknownTopicOrPartitionException || e instanceof RecordTooLargeException
            || e instanceof RecordBatchTooLargeException || e instanceof InvalidRecordException
            || e instanceof AuthorizationException || e instanceof InvalidRequiredAcksException;
    }

    // Commit errors the group coordinator returns before it appends the offsets (workloads/group.py).
    static boolean certainNotCommitted(Throwable e) {
        return e instanceof CommitFailedException || e instanceof RebalanceInProgressException
            || e instanceof FencedInstanceIdException || e instanceof AuthorizationException;
    }

    // Errors after which a producer is unusable: the next txn makes a new one.
    static boolean fatal(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
            || e instanceof AuthorizationException || e instanceof UnsupportedVersionException
            || e instanceof IllegalStateException;
    }

    String topic;
    int process;
    long opTimeoutMs;
    long pollTimeoutMs;
    int messageBytes;
    String txnId;
    boolean sendOffsets;
    Properties producerProps = new Properties();
    Properties consumerProps = new Properties();
    KafkaProducer<byte[], byte[]> producer;
    KafkaConsumer<byte[], byte[]> consumer;
    boolean broken;                                  // the producer must be replaced before the next op
    int made;                                        // producers made (instance names t<process>.<k>)
    String producerName;
    List<Integer> assigned = new ArrayList<>();
    Map<Integer, Long> next = new HashMap<>();      // partition -> offset after the last one recorded
    List<Map<String, Object>> events = new ArrayList<>();
    String groupId;


    void newProducer() {
        KafkaProducer<byte[], byte[]> old = producer;
        producer = null;
        if (old != null) quietly(() -> old.close(Duration.ZERO));
        producerName = "t" + process + "." + made++;
        Properties props = new Properties();
        props.putAll(producerProps);
        if (txnId != null) props.put("transactional.id", txnId);
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props);
        if (txnId != null) {
            try {
                p.initTransactions();
            } catch (RuntimeException e) {
                quietly(() -> p.close(Duration.ZERO));
                throw e;
            }
        }
        producer = p;
        broken = false;
    }

    KafkaConsumer<byte[], byte[]> consumer() {
        if (consumer == null) consumer = new KafkaConsumer<>(consumerProps);
        return consumer;
    }

    List<Map<String, Object>> takeEvents() {
        List<Map<String, Object>> out = events;
        events = new ArrayList<>();
        return out;
    }

    Map<String, Object> withEvents(Map<String, Object> c) {
        c.put("events", takeEvents());
        return c;
    }

    // -- helpers -----------------------------------------------------------------------------
    static Map<String, Object> completion(JsonNode op, String type, Object value, String error) {
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("type", type);
        c.put("f", op.path("f").asText());
        c.put("value", value);
        if (error != null) c.put("error", error);
        return c;
    }

    static String text(Throwable e) {
        String m = e.getMessage();
        return e.getClass().getSimpleName() + (m == null ? "" : ": " + m.replace('\n', ' '));
    }

    byte[] encode(long v) {
        String s = Long.toString(v);
        StringBuilder b = new StringBuilder(s);
        while (b.length() < messageBytes) b.append(' ');
        return b.toString().getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] key(int p) { return Integer.toString(p).getBytes(StandardCharsets.US_ASCII); }

    static Long decode(byte[] raw) {
        if (raw == null) return null;
        try {
            return Long.parseLong(new String(raw, StandardCharsets.US_ASCII).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    interface Action { void run() throws Exception; }

    static void quietly(Action a) {
        try { a.run(); } catch (Exception e) { System.err.println("WARN closing: " + text(e)); }
    }
}

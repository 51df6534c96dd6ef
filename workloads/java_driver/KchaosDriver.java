// kchaos's driver for the official Java client (kafka-clients): one logical
// process's producer and consumer, driven over the client protocol of
// docs/design.md ("The client protocol"): one JSON request a line on stdin,
// one JSON completion a line on stdout, in order. Standard output carries
// nothing else; the client's log goes to stderr.
//
// Requests: {"f": "check", "config": {...}} alone (an offline settings check), or
// {"f": "open", "config": {...}} first, then history ops
// ({"f": "send" | "poll" | "assign" | "subscribe" | "commit" | "txn", "value": ..., "abort"?, "async"?})
// and {"f": "close"}; or, for pipelined sends, {"f": "send-async", ...} requests, whose
// completions come later in {"f": "sent", "done": [...]} lines (Pipelined), and {"f": "bench", ...}. A crash is not a request: the runner kills this process.
// Every completion is the op's history completion (type ok | fail | info, f,
// value, error?, outcomes?, producer?, abort?, events?); the runner adds
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

public final class KchaosDriver extends Pipelined {
    KchaosDriver() { }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, "UTF-8");
        System.setOut(System.err);                  // nothing but completions on the protocol's stream
        KchaosDriver d = new KchaosDriver();
        d.out = out;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode op = JSON.readTree(line);
            Map<String, Object> done;
            try {
                done = d.invoke(op);
            } catch (Exception e) {              // a bug or an unknown state: the runner retires the process
                done = completion(op, INFO, op.get("value"), "crash: " + text(e));
            }
            if (done != null) d.emit(done);          // send-async answers in "sent" lines, later
            if ("close".equals(op.path("f").asText())) break;
        }
        d.close();
        out.flush();
        Runtime.getRuntime().halt(0);               // no shutdown hooks, no lingering client threads
    }

    Map<String, Object> invoke(JsonNode op) throws Exception {
        switch (op.path("f").asText()) {
            case "check": return check(op);
            case "open": return open(op);
            case "send": return send(op);
            case "poll": return poll(op);
            case "assign": return assign(op);
            case "subscribe": return subscribe(op);
            case "commit": return commit(op);
            case "txn": return txn(op);
            case "send-async": return sendAsync(op);
            case "bench": return bench(op);
            case "close": {
                close();
                Map<String, Object> c = completion(op, OK, null, null);
                c.put("events", takeEvents());
                return c;
            }
            default: throw new IllegalArgumentException("the driver has no op " + op.path("f").asText());
        }
    }

    // -- open and close ---------------------------------------------------------------------
    Map<String, Object> open(JsonNode op) {
        JsonNode c = op.get("config");
        topic = c.get("topic").asText();
        process = c.path("process").asInt();
        opTimeoutMs = c.get("op_timeout_ms").asLong();
        pollTimeoutMs = c.get("poll_timeout_ms").asLong();
        messageBytes = c.path("message_bytes").asInt(0);
        txnId = c.hasNonNull("transactional_id") ? c.get("transactional_id").asText() : null;
        sendOffsets = c.path("send_offsets").asBoolean(false);
        c.get("producer").fields().forEachRemaining(e -> producerProps.put(e.getKey(), e.getValue().asText()));
        c.get("consumer").fields().forEachRemaining(e -> consumerProps.put(e.getKey(), e.getValue().asText()));
        producerProps.put("key.serializer", ByteArraySerializer.class.getName());
        producerProps.put("value.serializer", ByteArraySerializer.class.getName());
        consumerProps.put("key.deserializer", ByteArrayDeserializer.class.getName());
        consumerProps.put("value.deserializer", ByteArrayDeserializer.class.getName());
        groupId = consumerProps.getProperty("group.id");
        Map<String, Object> value = new LinkedHashMap<>();
        value.put("client", "kafka-clients");
        value.put("version", AppInfoParser.getVersion());
        value.put("java", System.getProperty("java.version"));
        if (txnId != null) {                     // init_transactions fences every earlier instance now
            try {
                newProducer();
            } catch (Exception e) {
                return completion(op, FAIL, value, "initTransactions: " + text(e));
            }
        }
        return completion(op, OK, value, null);
    }

    /** Offline: the Java client's word on the settings (unknown names, bad values); nothing connects. */
    Map<String, Object> check(JsonNode op) {
        JsonNode c = op.get("config");
        for (String table : List.of("producer", "consumer")) {
            Properties props = new Properties();
            c.get(table).fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
            boolean isProducer = table.equals("producer");
            java.util.Set<String> known = isProducer ? ProducerConfig.configNames() : ConsumerConfig.configNames();
            for (Object k : props.keySet()) {
                if (!known.contains(k.toString()))
                    return completion(op, FAIL, null, table + ".\"" + k + "\": not a setting of the Java client "
                                      + "(kafka-clients " + AppInfoParser.getVersion() + ")");
            }
            props.put("bootstrap.servers", "localhost:9092");
            try {
                if (isProducer) {
                    props.put("key.serializer", ByteArraySerializer.class.getName());
                    props.put("value.serializer", ByteArraySerializer.class.getName());
                    new ProducerConfig(props);
                } else {
                    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
                    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
                    new ConsumerConfig(props);
                }
            } catch (KafkaException e) {
                return completion(op, FAIL, null, table + ": " + e.getMessage());
            }
        }
        Map<String, Object> value = new LinkedHashMap<>();
        value.put("client", "kafka-clients");
        value.put("version", AppInfoParser.getVersion());
        value.put("java", System.getProperty("java.version"));
        return completion(op, OK, value, null);
    }

    void close() {
        KafkaProducer<byte[], byte[]> p = producer;
        producer = null;
        if (p != null) quietly(() -> p.close(Duration.ZERO));    // no flush: what is in flight is abandoned
        KafkaConsumer<byte[], byte[]> c = consumer;
        consumer = null;
        if (c != null) quietly(() -> c.close(Duration.ofMillis(Math.min(opTimeoutMs, 5000))));
    }

}

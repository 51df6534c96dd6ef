// The Java driver's batch sends (docs/design.md, "The client protocol": send).
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

abstract class Sends extends DriverState {
    // -- send --------------------------------------------------------------------------------
    Map<String, Object> send(JsonNode op) throws InterruptedException {
        long deadline = System.nanoTime() + opTimeoutMs * 1_000_000L;
        JsonNode msgs = op.get("value");
        int n = msgs.size();
        if (producer == null || broken) newProducer();
        AtomicReferenceArray<Object> results = new AtomicReferenceArray<>(n);   // Long offset or Throwable
        boolean[] neverQueued = new boolean[n];
        CountDownLatch pending = new CountDownLatch(n);
        Thread caller = Thread.currentThread();
        for (int i = 0; i < n; i++) {
            final int k = i;
            int p = msgs.get(i).get(0).asInt();
            long v = msgs.get(i).get(1).asLong();
            ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, p, key(p), encode(v));
            try {
                producer.send(rec, (md, ex) -> {
                    // On the caller's thread, inside send(): refused before it reached the accumulator.
                    if (ex != null && Thread.currentThread() == caller) neverQueued[k] = true;
                    if (results.compareAndSet(k, null, ex == null ? (Object) md.offset() : ex)) pending.countDown();
                });
            } catch (Exception e) {                   // thrown by send(): never queued
                neverQueued[k] = true;
                if (e instanceof KafkaException && fatal(e)) broken = true;
                if (results.compareAndSet(k, null, e)) pending.countDown();
            }
        }
        pending.await(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        return sendCompletion(op, msgs, results, neverQueued);
    }

    Map<String, Object> sendCompletion(JsonNode op, JsonNode msgs, AtomicReferenceArray<Object> results,
                                       boolean[] neverQueued) {
        int n = msgs.size();
        List<Object> value = new ArrayList<>();
        List<String> outcomes = new ArrayList<>();
        Map<String, Integer> reasons = new LinkedHashMap<>();
        for (int i = 0; i < n; i++) {
            Object r = results.get(i);
            List<Object> m = new ArrayList<>();
            m.add(msgs.get(i).get(0).asInt());
            m.add(msgs.get(i).get(1).asLong());
            m.add(r instanceof Long ? r : null);           // JSON null: no offset
            value.add(m);
            if (r instanceof Long) { outcomes.add(OK); continue; }
            String reason;
            if (r == null) {
                outcomes.add(INFO);
                reason = "no delivery report by the op deadline";
            } else {
                Throwable e = (Throwable) r;
                outcomes.add(neverQueued[i] || certainNotWritten(e) ? FAIL : INFO);
                reason = text(e) + (neverQueued[i] ? " (refused by send())" : "");
            }
            reasons.merge(reason, 1, Integer::sum);
        }
        if (!outcomes.contains(FAIL) && !outcomes.contains(INFO)) return completion(op, OK, value, null);
        String type = outcomes.stream().allMatch(FAIL::equals) ? FAIL : INFO;
        StringBuilder error = new StringBuilder();
        reasons.forEach((t, c) -> error.append(error.length() > 0 ? "; " : "").append(c).append('/').append(n)
                                       .append(' ').append(t));
        Map<String, Object> c = completion(op, type, value, error.toString());
        c.put("outcomes", outcomes);
        return c;
    }

}

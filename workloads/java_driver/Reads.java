// The Java driver's consumer ops: assign, subscribe (rebalance events), poll, commit.
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

abstract class Reads extends Sends {
    // -- consumer ----------------------------------------------------------------------------
    Map<String, Object> assign(JsonNode op) {
        List<Integer> parts = new ArrayList<>();
        op.get("value").forEach(p -> parts.add(p.asInt()));
        KafkaConsumer<byte[], byte[]> c = consumer();
        List<TopicPartition> tps = new ArrayList<>();
        for (int p : parts) tps.add(new TopicPartition(topic, p));
        try {
            c.assign(tps);
            List<TopicPartition> fresh = new ArrayList<>();
            for (int p : parts) {
                Long at = assigned.contains(p) ? next.get(p) : null;
                if (at != null) c.seek(new TopicPartition(topic, p), at);   // kept: where the last read left it
                else fresh.add(new TopicPartition(topic, p));
            }
            if (!fresh.isEmpty()) c.seekToBeginning(fresh);   // an empty list would mean every partition
        } catch (KafkaException e) {
            return completion(op, FAIL, parts, text(e));
        }
        next.keySet().retainAll(parts);
        for (int p : new ArrayList<>(next.keySet())) if (!assigned.contains(p)) next.remove(p);
        assigned = parts;
        return completion(op, OK, parts, null);
    }

    Map<String, Object> subscribe(JsonNode op) {
        String t = op.hasNonNull("value") ? op.get("value").asText() : topic;
        try {
            consumer().subscribe(List.of(t), new Rebalances());
        } catch (KafkaException e) {
            return completion(op, FAIL, t, text(e));
        }
        return completion(op, OK, t, null);
    }

    /** Rebalance callbacks run inside poll, commitSync and close: they only record (history.ops: rebalance). */
    final class Rebalances implements ConsumerRebalanceListener {
        public void onPartitionsRevoked(Collection<TopicPartition> parts) { record(List.of(), parts, false); }
        public void onPartitionsAssigned(Collection<TopicPartition> parts) { record(parts, List.of(), false); }
        public void onPartitionsLost(Collection<TopicPartition> parts) { record(List.of(), parts, true); }

        void record(Collection<TopicPartition> in, Collection<TopicPartition> gone, boolean lost) {
            if (in.isEmpty() && gone.isEmpty()) return;
            Map<String, Object> value = new LinkedHashMap<>();
            value.put("assigned", partitions(in));
            value.put("revoked", partitions(gone));
            Integer generation = null;
            String member = null;
            try {
                generation = consumer.groupMetadata().generationId();
                member = consumer.groupMetadata().memberId();
            } catch (RuntimeException e) { /* not known: null */ }
            value.put("generation", generation == null || generation < 0 ? null : generation);
            value.put("member", member == null || member.isEmpty() ? null : member);
            if (lost) value.put("lost", true);
            for (TopicPartition tp : gone) next.remove(tp.partition());
            Map<String, Object> ev = new LinkedHashMap<>();
            ev.put("type", OK);
            ev.put("f", "rebalance");
            ev.put("value", value);
            events.add(ev);
        }
    }

    static List<Integer> partitions(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        out.sort(null);
        return out;
    }

    Map<String, Object> poll(JsonNode op) {
        KafkaConsumer<byte[], byte[]> c = consumer();
        List<String> errors = new ArrayList<>();
        Map<String, Object> value;
        try {
            value = shapePoll(pollRecords(c), errors, null);
        } catch (KafkaException e) {
            errors.add(text(e));
            Map<String, Object> out = completion(op, positionsUnchanged(c) ? FAIL : INFO, null, String.join("; ", errors));
            out.put("events", takeEvents());
            return out;
        }
        Map<String, Object> out = completion(op, OK, value, errors.isEmpty() ? null : String.join("; ", errors));
        out.put("events", takeEvents());
        return out;
    }

    /** One poll; nothing when the consumer has no partitions (the Java client would throw, librdkafka returns none). */
    ConsumerRecords<byte[], byte[]> pollRecords(KafkaConsumer<byte[], byte[]> c) {
        if (c.assignment().isEmpty() && c.subscription().isEmpty()) return ConsumerRecords.empty();
        return c.poll(Duration.ofMillis(pollTimeoutMs));
    }

    /** The poll value {"<p>": [[offset, value], ...]} in the order received; notes the next offsets. */
    Map<String, Object> shapePoll(ConsumerRecords<byte[], byte[]> recs, List<String> errors, Map<Integer, Long> firstRead) {
        Map<String, Object> value = new LinkedHashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : recs) {
            Long v = decode(r.value());
            if (v == null) {
                errors.add("partition " + r.partition() + " offset " + r.offset() + ": value is not an int");
                continue;
            }
            @SuppressWarnings("unchecked")
            List<Object> pairs = (List<Object>) value.computeIfAbsent(Integer.toString(r.partition()), k -> new ArrayList<>());
            pairs.add(List.of(r.offset(), v));
            next.put(r.partition(), r.offset() + 1);
            if (firstRead != null) firstRead.putIfAbsent(r.partition(), r.offset());
        }
        return value;
    }

    /** After a poll that raised: is every assigned partition where the recorded reads left it (or unset)? */
    boolean positionsUnchanged(KafkaConsumer<byte[], byte[]> c) {
        try {
            for (TopicPartition tp : c.assignment()) {
                Long expected = next.get(tp.partition());
                long at;
                try {
                    at = c.position(tp, Duration.ZERO);
                } catch (TimeoutException e) {
                    if (expected == null) continue;      // no position yet: nothing was consumed
                    return false;
                }
                if (expected == null || at != expected) return false;
            }
            return true;
        } catch (RuntimeException e) {
            return false;
        }
    }

    Map<String, Object> commit(JsonNode op) {
        KafkaConsumer<byte[], byte[]> c = consumer();
        Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
        Map<String, Object> value = new TreeMap<>();
        for (TopicPartition tp : c.assignment()) {
            Long at = next.get(tp.partition());
            if (at == null) continue;
            offsets.put(tp, new OffsetAndMetadata(at));
            value.put(Integer.toString(tp.partition()), at);
        }
        if (offsets.isEmpty()) return withEvents(completion(op, FAIL, value, "nothing to commit"));
        if (op.path("async").asBoolean(false)) return withEvents(commitAsync(op, c, offsets, value));
        try {
            c.commitSync(offsets, Duration.ofMillis(opTimeoutMs));
        } catch (KafkaException e) {
            return withEvents(completion(op, certainNotCommitted(e) ? FAIL : INFO, value, text(e)));
        }
        return withEvents(completion(op, OK, value, null));
    }

    /** commitAsync, then polls until its callback or the op deadline. What those polls return is
     * not recorded here: they run with every partition paused, so they return nothing. */
    Map<String, Object> commitAsync(JsonNode op, KafkaConsumer<byte[], byte[]> c,
                                    Map<TopicPartition, OffsetAndMetadata> offsets, Map<String, Object> value) {
        Exception[] result = new Exception[1];
        boolean[] called = new boolean[1];
        c.commitAsync(offsets, (o, e) -> { called[0] = true; result[0] = e; });
        long deadline = System.nanoTime() + opTimeoutMs * 1_000_000L;
        Collection<TopicPartition> paused = new ArrayList<>(c.assignment());
        c.pause(paused);
        try {
            while (!called[0] && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(50));
                if (!recs.isEmpty()) throw new IllegalStateException("a paused consumer returned records");
            }
        } catch (KafkaException e) {
            return completion(op, INFO, value, text(e));
        } finally {
            c.resume(c.assignment());
        }
        if (!called[0]) return completion(op, INFO, value, "no commit callback by the op deadline");
        if (result[0] == null) return completion(op, OK, value, null);
        return completion(op, certainNotCommitted(result[0]) ? FAIL : INFO, value, text(result[0]));
    }

}

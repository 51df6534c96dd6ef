// kchaos's driver for the official Java client (kafka-clients): one logical
// process's producer and consumer, driven over the client protocol of
// docs/design.md ("The client protocol"): one JSON request a line on stdin,
// one JSON completion a line on stdout, in order. Standard output carries
// nothing else; the client's log goes to stderr.
//
// Requests: {"f": "check", "config": {...}} alone (an offline settings check), or
// {"f": "open", "config": {...}} first, then history ops
// ({"f": "send" | "poll" | "assign" | "subscribe" | "commit" | "txn", "value": ..., "abort"?, "async"?})
// and {"f": "close"}. A crash is not a request: the runner kills this process.
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

public final class KchaosDriver {
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

    final PrintStream out;
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

    KchaosDriver(PrintStream out) { this.out = out; }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, "UTF-8");
        System.setOut(System.err);                  // nothing but completions on the protocol's stream
        KchaosDriver d = new KchaosDriver(out);
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
            out.println(JSON.writeValueAsString(done));
            out.flush();
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

    List<Map<String, Object>> takeEvents() {
        List<Map<String, Object>> out = events;
        events = new ArrayList<>();
        return out;
    }

    Map<String, Object> poll(JsonNode op) {
        KafkaConsumer<byte[], byte[]> c = consumer();
        List<String> errors = new ArrayList<>();
        Map<String, Object> value;
        try {
            value = shapePoll(c.poll(Duration.ofMillis(pollTimeoutMs)), errors, null);
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

    Map<String, Object> withEvents(Map<String, Object> c) {
        c.put("events", takeEvents());
        return c;
    }

    // -- transactions ------------------------------------------------------------------------
    Map<String, Object> txn(JsonNode op) {
        long deadline = System.nanoTime() + opTimeoutMs * 1_000_000L;
        JsonNode planned = op.get("value");
        boolean choseAbort = op.path("abort").asBoolean(false);
        List<List<Object>> done = new ArrayList<>();
        List<Object[]> offsets = new ArrayList<>();   // per send: {offset or Throwable}
        List<String> errors = new ArrayList<>();
        Map<Integer, Long> firstRead = new TreeMap<>();
        Txn t = new Txn(op, planned, done, offsets, errors, firstRead);

        if (broken || producer == null) {
            try {
                newProducer();
            } catch (Exception e) {
                errors.add("initTransactions: " + text(e));
                return t.finish(FAIL, false, false);
            }
        }
        try {
            producer.beginTransaction();
        } catch (Exception e) {
            noteFatal(e);
            errors.add("beginTransaction: " + text(e));
            return t.finish(FAIL, false, false);
        }
        boolean mustAbort = false;
        for (JsonNode mop : planned) {
            if ("send".equals(mop.get(0).asText())) {
                int p = mop.get(1).asInt();
                long v = mop.get(2).asLong();
                Object[] slot = new Object[1];
                offsets.add(slot);
                List<Object> entry = new ArrayList<>(List.of("send", p, v));
                entry.add(null);
                done.add(entry);
                try {
                    producer.send(new ProducerRecord<>(topic, p, key(p), encode(v)), (md, ex) -> {
                        synchronized (slot) { slot[0] = ex == null ? (Object) md.offset() : ex; }
                    });
                } catch (Exception e) {
                    noteFatal(e);
                    errors.add("send " + p + "/" + v + " refused: " + text(e));
                    mustAbort = true;
                    break;
                }
            } else {
                List<Object> entry = new ArrayList<>();
                entry.add("poll");
                try {
                    entry.add(shapePoll(consumer().poll(Duration.ofMillis(pollTimeoutMs)), errors, firstRead));
                } catch (KafkaException e) {
                    errors.add("poll: " + text(e));
                    entry.add(new LinkedHashMap<>());
                }
                done.add(entry);
            }
        }
        if (!mustAbort) {
            try {
                producer.flush();          // every send gets its delivery report (bounded by delivery.timeout.ms)
                if (!choseAbort && sendOffsets) sendOffsets();
            } catch (Exception e) {
                errors.add("sendOffsetsToTransaction: " + text(e));
                mustAbort = true;
            }
        }
        if (mustAbort || choseAbort) {
            // commitTransaction is never called on this path: not committed, whatever follows.
            if (!abort(deadline, errors)) broken = true;
            return t.finish(FAIL, true, !mustAbort);
        }
        String outcome = commitTxn(deadline, errors);
        return t.finish(outcome, FAIL.equals(outcome), false);
    }

    /** The completion of one txn op from what happened (the micro-ops never reached: no offset, no reads). */
    final class Txn {
        final JsonNode op, planned;
        final List<List<Object>> done;
        final List<Object[]> offsets;
        final List<String> errors;
        final Map<Integer, Long> firstRead;

        Txn(JsonNode op, JsonNode planned, List<List<Object>> done, List<Object[]> offsets, List<String> errors,
            Map<Integer, Long> firstRead) {
            this.op = op; this.planned = planned; this.done = done; this.offsets = offsets; this.errors = errors;
            this.firstRead = firstRead;
        }

        Map<String, Object> finish(String type, boolean rewind, boolean byChoice) {
            Iterator<Object[]> sends = offsets.iterator();
            List<Object> value = new ArrayList<>();
            for (List<Object> entry : done) {
                if ("send".equals(entry.get(0))) {
                    Object[] slot = sends.next();
                    Object r;
                    synchronized (slot) { r = slot[0]; }
                    if (r instanceof Long) entry.set(3, r);
                    else if (r instanceof Throwable)
                        errors.add("send " + entry.get(1) + "/" + entry.get(2) + ": " + text((Throwable) r));
                }
                value.add(entry);
            }
            for (int i = done.size(); i < planned.size(); i++) {
                JsonNode m = planned.get(i);
                List<Object> rest = new ArrayList<>();
                rest.add(m.get(0).asText());
                if ("send".equals(m.get(0).asText())) {
                    rest.add(m.get(1).asInt());
                    rest.add(m.get(2).asLong());
                    rest.add(null);
                }
                value.add(rest);
            }
            Map<String, Object> c = completion(op, type, value, errors.isEmpty() ? null : String.join("; ", errors));
            c.put("producer", producerName);
            if (byChoice) c.put("abort", true);
            if (rewind) {
                for (Map.Entry<Integer, Long> e : firstRead.entrySet()) {
                    try {
                        consumer().seek(new TopicPartition(topic, e.getKey()), e.getValue());
                        next.put(e.getKey(), e.getValue());
                    } catch (RuntimeException ex) {
                        System.err.println("WARN rewinding partition " + e.getKey() + " after an abort: " + text(ex));
                    }
                }
            }
            return c;
        }
    }

    void sendOffsets() {
        KafkaConsumer<byte[], byte[]> c = consumer();
        Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
        for (TopicPartition tp : c.assignment()) {
            Long at = next.get(tp.partition());
            if (at != null) positions.put(tp, new OffsetAndMetadata(at));
        }
        if (!positions.isEmpty()) producer.sendOffsetsToTransaction(positions, c.groupMetadata());
    }

    /** abortTransaction, retried after timeouts until the deadline; true when it returned. */
    boolean abort(long deadline, List<String> errors) {
        while (true) {
            try {
                producer.abortTransaction();
                return true;
            } catch (TimeoutException e) {
                if (System.nanoTime() < deadline) continue;
                errors.add("abortTransaction: " + text(e));
                return false;
            } catch (Exception e) {
                noteFatal(e);
                errors.add("abortTransaction: " + text(e));
                return false;
            }
        }
    }

    /** ok: commitTransaction returned. fail: it raised an error other than a timeout and an
     * abortTransaction then returned (the coordinator refuses to abort a committing transaction).
     * info: the outcome was not learned (timeouts until the deadline, a fatal error, an abort that raised). */
    String commitTxn(long deadline, List<String> errors) {
        while (true) {
            try {
                producer.commitTransaction();
                return OK;
            } catch (TimeoutException e) {              // retrying commitTransaction awaits the same EndTxn
                if (System.nanoTime() < deadline) continue;
                errors.add("commitTransaction: " + text(e));
                broken = true;
                return INFO;
            } catch (Exception e) {
                errors.add("commitTransaction: " + text(e));
                noteFatal(e);
                if (broken) return INFO;
                if (abort(deadline, errors)) return FAIL;
                broken = true;
                return INFO;
            }
        }
    }

    void noteFatal(Throwable e) {
        if (fatal(e)) broken = true;
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

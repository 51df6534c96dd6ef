// The Java driver's transactions: a txn op's micro-ops and its ok / fail / info.
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

abstract class Transactions extends Reads {
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
                    entry.add(shapePoll(pollRecords(consumer()), errors, firstRead));
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

}

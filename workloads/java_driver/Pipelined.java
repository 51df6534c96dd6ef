// The Java driver's pipelined sends and its benchmark (docs/design.md, "The client protocol":
// pipelined sends). A send-async request answers nothing itself: each message's completion
// comes later, matched by its op id, in a "sent" line that a writer thread makes of every
// delivery callback that came in since its last line.
import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

abstract class Pipelined extends Transactions {
    PrintStream out;                                        // the protocol's stream (main sets it)
    private final LinkedBlockingQueue<List<Object>> done = new LinkedBlockingQueue<>();
    private Thread writer;
    private String pipeName;                                // the pipelined producer instance's name
    private KafkaProducer<byte[], byte[]> benchProducer;

    /** One line on the protocol's stream; the writer thread and the request loop share it. */
    void emit(Object message) throws Exception {
        String line = JSON.writeValueAsString(message);
        synchronized (this) {
            out.println(line);
            out.flush();
        }
    }

    // -- send-async --------------------------------------------------------------------------
    /** {"f": "send-async", "producer": name, "sends": [[id, partition, value], ...]}: hands each
     *  message to KafkaProducer.send with a callback; no answer line. A producer name other than
     *  the current instance's closes that one (no flush) and opens a new one under the name. */
    Map<String, Object> sendAsync(JsonNode op) {
        startWriter();
        String name = op.get("producer").asText();
        try {
            if (producer == null || !name.equals(pipeName)) newPipelinedProducer(name);
        } catch (Exception e) {                     // no producer: nothing of the batch was queued
            for (JsonNode s : op.get("sends")) done.add(failure(s.get(0).asLong(), e, true));
            return null;
        }
        KafkaProducer<byte[], byte[]> p = producer;
        Thread caller = Thread.currentThread();
        for (JsonNode s : op.get("sends")) {
            long id = s.get(0).asLong();
            int partition = s.get(1).asInt();
            ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, partition, key(partition),
                                                                      encode(s.get(2).asLong()));
            try {
                p.send(rec, (md, ex) -> {
                    if (ex == null) done.add(List.of(id, OK, md.offset()));
                    else done.add(failure(id, ex, Thread.currentThread() == caller));
                });
            } catch (Exception e) {                 // thrown by send(): never queued
                done.add(failure(id, e, true));
            }
        }
        return null;
    }

    /** [id, fail|info, null, error, fatal]: fail only when certainly not written (as a batch send's). */
    static List<Object> failure(long id, Throwable e, boolean refused) {
        List<Object> entry = new ArrayList<>(5);
        entry.add(id);
        entry.add(refused || certainNotWritten(e) ? FAIL : INFO);
        entry.add(null);
        entry.add(text(e) + (refused ? " (refused by send())" : ""));
        entry.add(fatal(e));
        return entry;
    }

    void newPipelinedProducer(String name) {
        KafkaProducer<byte[], byte[]> old = producer;
        producer = null;
        if (old != null) quietly(() -> old.close(Duration.ZERO));   // its callbacks still come, late
        Properties props = new Properties();
        props.putAll(producerProps);
        props.put("client.id", "kchaos-" + name);
        producer = new KafkaProducer<>(props);
        pipeName = name;
    }

    private synchronized void startWriter() {
        if (writer != null) return;
        writer = new Thread(() -> {
            List<List<Object>> batch = new ArrayList<>();
            try {
                while (true) {
                    batch.add(done.take());
                    done.drainTo(batch);
                    Map<String, Object> line = new LinkedHashMap<>();
                    line.put("f", "sent");
                    line.put("done", batch);
                    emit(line);
                    batch.clear();
                }
            } catch (Exception e) {
                System.err.println("ERROR the completion writer stopped: " + text(e));
            }
        }, "kchaos-completions");
        writer.setDaemon(true);
        writer.start();
    }

    // -- bench -------------------------------------------------------------------------------
    /** {"f": "bench", "seconds": s, "in_flight": n}: the client sending by itself, nothing recorded:
     *  one producer of its own with the open settings keeps up to in_flight messages outstanding (a permit
     *  freed in each callback), values 0, 1, ... round-robin over the partitions, for s seconds.
     *  The value: acknowledged and failed callbacks within the window, and its length. */
    Map<String, Object> bench(JsonNode op) throws Exception {
        long nanos = (long) (op.get("seconds").asDouble() * 1e9);
        int inFlight = op.get("in_flight").asInt();
        int partitions = Math.max(1, op.path("partitions").asInt(1));
        if (benchProducer == null) {                // its own instance: the pipelined one stays as it is
            Properties props = new Properties();
            props.putAll(producerProps);
            props.put("client.id", "kchaos-bench-" + process);
            benchProducer = new KafkaProducer<>(props);
        }
        KafkaProducer<byte[], byte[]> p = benchProducer;
        Semaphore slots = new Semaphore(inFlight);
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        long t0 = System.nanoTime(), end = t0 + nanos;
        long v = 0;
        while (System.nanoTime() < end) {
            if (!slots.tryAcquire(10, TimeUnit.MILLISECONDS)) continue;
            int partition = (int) (v % partitions);
            p.send(new ProducerRecord<>(topic, partition, key(partition), encode(v++)), (md, ex) -> {
                if (System.nanoTime() < end) (ex == null ? acked : failed).incrementAndGet();
                slots.release();
            });
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        slots.tryAcquire(inFlight, opTimeoutMs, TimeUnit.MILLISECONDS);     // drain, untimed
        Map<String, Object> value = new LinkedHashMap<>();
        value.put("acked", acked.get());
        value.put("failed", failed.get());
        value.put("seconds", seconds);
        return completion(op, OK, value, null);
    }
}

// PerfTest: a load program on the RabbitMQ Java client (com.rabbitmq.client),
// in the spirit of RabbitMQ's PerfTest, for compat-tests/bench/compare.sh
// --real-clients. The same flags and the same one-line JSON result as the Go
// program beside it (clients/go/perftest.go).
//
// Each producer and each consumer has a connection and a channel of its own. A
// producer publishes with one basicPublish call per message (the client writes
// the method, header and body frames and flushes them: one socket write per
// publish), keeping at most --confirm unconfirmed (a semaphore the confirm
// listener releases). A consumer sets basicQos --prefetch and acks with
// multiple=true every --multi-ack messages (or uses auto-ack). Each body starts
// with its send time (8 octets, Unix nanoseconds) for the end-to-end latency.
//
// Build and run (Debian's librabbitmq-client-java and libslf4j-java):
//   javac -cp /usr/share/java/amqp-client.jar -d OUT PerfTest.java
//   java -cp OUT:/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar \
//        PerfTest --uri amqp://guest:guest@127.0.0.1:5672/%2f --duration 10 ...

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.ConfirmListener;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.MessageProperties;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

public final class PerfTest {
    // --- settings ---------------------------------------------------------------
    String uri = "amqp://guest:guest@127.0.0.1:5672/%2f";
    int producers = 1, consumers = 1, size = 16, confirm = 0, prefetch = 0, multiAck = 1;
    boolean persistent = false, autoAck = false;
    double rate = 0, durationS = 10;
    String queue = "perftest-java", queueType = "";

    // --- the run ------------------------------------------------------------------
    final AtomicLong published = new AtomicLong(), confirmed = new AtomicLong(),
            nacked = new AtomicLong(), consumed = new AtomicLong();
    final List<String> errors = Collections.synchronizedList(new ArrayList<>());
    final List<long[]> confirmLat = Collections.synchronizedList(new ArrayList<>());
    final List<long[]> e2eLat = Collections.synchronizedList(new ArrayList<>());
    volatile long startNs, deadlineNs; // Unix-epoch nanoseconds

    static long nowNs() {
        java.time.Instant t = java.time.Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    /** A growable list of longs (latencies in ns). */
    static final class Longs {
        long[] a = new long[1024];
        int n;
        void add(long v) {
            if (n == a.length) a = Arrays.copyOf(a, n * 2);
            a[n++] = v;
        }
        long[] done() { return Arrays.copyOf(a, n); }
    }

    /** Publisher-confirm bookkeeping of one producer: send times by tag. */
    static final class Window implements ConfirmListener {
        final AtomicLongArray sent;
        final long mask;
        final Semaphore free;
        final PerfTest run;
        final Longs lat = new Longs();
        long lowest = 1; // lowest tag not yet confirmed (listener thread only)

        Window(int window, PerfTest run) {
            int cap = Integer.highestOneBit(Math.max(window, 1) * 2 - 1) * 2;
            sent = new AtomicLongArray(cap);
            mask = cap - 1;
            free = new Semaphore(window);
            this.run = run;
        }

        void send(long tag, long ns) { sent.set((int) (tag & mask), ns); }

        private void done(long tag, boolean ack, long now) {
            long t = sent.getAndSet((int) (tag & mask), 0);
            if (t == 0) return;
            if (ack) {
                if (now <= run.deadlineNs) run.confirmed.incrementAndGet();
                lat.add(now - t);
            } else {
                run.nacked.incrementAndGet();
            }
            free.release();
        }

        private synchronized void handle(long tag, boolean multiple, boolean ack) {
            long now = nowNs();
            if (multiple) {
                for (long t = lowest; t <= tag; t++) done(t, ack, now);
            } else {
                done(tag, ack, now);
            }
            while (sent.get((int) (lowest & mask)) == 0 && lowest <= tag) lowest++;
        }

        @Override public void handleAck(long tag, boolean multiple) { handle(tag, multiple, true); }
        @Override public void handleNack(long tag, boolean multiple) { handle(tag, multiple, false); }
    }

    void producer(Channel ch, CountDownLatch ready, CountDownLatch go) {
        try {
            Window w = null;
            if (confirm > 0) {
                ch.confirmSelect();
                w = new Window(confirm, this);
                ch.addConfirmListener(w);
            }
            ready.countDown();
            go.await();
            byte[] body = new byte[size];
            AMQP.BasicProperties props = persistent ? MessageProperties.PERSISTENT_BASIC : MessageProperties.BASIC;
            long intervalNs = rate > 0 ? (long) (1e9 / rate) : 0;
            long seq = 0;
            while (true) {
                long now = nowNs();
                if (now >= deadlineNs) break;
                if (w != null && !w.free.tryAcquire(deadlineNs - now, TimeUnit.NANOSECONDS)) break;
                if (intervalNs > 0) {
                    long due = startNs + seq * intervalNs;
                    long wait = due - nowNs();
                    if (wait > 0) {
                        if (due >= deadlineNs) break;
                        TimeUnit.NANOSECONDS.sleep(wait);
                    }
                }
                long t = nowNs();
                if (size >= 8) ByteBuffer.wrap(body).putLong(0, t);
                seq++;
                if (w != null) w.send(seq, t);
                ch.basicPublish("", queue, props, body);
                published.incrementAndGet();
            }
            if (w != null) {
                // The listener thread may still be adding; give it its own copy point.
                synchronized (w) { confirmLat.add(w.lat.done()); }
            }
        } catch (Exception e) {
            errors.add("producer: " + describe(e));
            ready.countDown();
        }
    }

    void consumer(Channel ch, CountDownLatch ready) {
        try {
            if (prefetch > 0) ch.basicQos(prefetch);
            final Longs lat = new Longs();
            final int[] unacked = {0};
            ch.basicConsume(queue, autoAck, new DefaultConsumer(ch) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body)
                        throws java.io.IOException {
                    long now = nowNs();
                    if (now <= deadlineNs) consumed.incrementAndGet();
                    if (body.length >= 8) {
                        long t = ByteBuffer.wrap(body).getLong(0);
                        if (startNs > 0 && t >= startNs) {
                            synchronized (lat) { lat.add(now - t); }
                        }
                    }
                    if (!autoAck && ++unacked[0] >= multiAck) {
                        getChannel().basicAck(env.getDeliveryTag(), true);
                        unacked[0] = 0;
                    }
                }
            });
            e2eHolders.add(lat);
            ready.countDown();
        } catch (Exception e) {
            errors.add("consumer: " + describe(e));
            ready.countDown();
        }
    }

    final List<Longs> e2eHolders = Collections.synchronizedList(new ArrayList<>());

    static String latencyJson(List<long[]> parts) {
        int n = 0;
        for (long[] p : parts) n += p.length;
        if (n == 0) return "null";
        long[] all = new long[n];
        int at = 0;
        for (long[] p : parts) { System.arraycopy(p, 0, all, at, p.length); at += p.length; }
        Arrays.sort(all);
        final int total = n;
        java.util.function.DoubleFunction<Double> q = f -> all[(int) (f * (total - 1))] / 1000.0;
        return String.format("{\"count\":%d,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f}",
                n, q.apply(0.50), q.apply(0.99), all[n - 1] / 1000.0);
    }

    /** An exception with its causes (the client wraps a broker's close in an IOException). */
    static String describe(Throwable e) {
        StringBuilder b = new StringBuilder(e.toString());
        for (Throwable c = e.getCause(); c != null && b.length() < 1000; c = c.getCause()) b.append(": ").append(c);
        return b.toString();
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    String json(double elapsed) {
        StringBuilder errs = new StringBuilder("[");
        synchronized (errors) {
            for (int i = 0; i < errors.size(); i++) errs.append(i > 0 ? "," : "").append(str(errors.get(i)));
        }
        errs.append("]");
        String settings = String.format(
                "{\"client\":\"rabbitmq-java-client\",\"producers\":%d,\"consumers\":%d,\"body_size\":%d,"
                + "\"persistent\":%b,\"confirm_window\":%d,\"prefetch\":%d,\"multi_ack_every\":%d,\"auto_ack\":%b,"
                + "\"rate_per_producer\":%s,\"duration_s\":%s,\"queue\":%s,\"queue_type\":%s,\"frames_per_write\":1}",
                producers, consumers, size, persistent, confirm, prefetch, multiAck, autoAck,
                rate > 0 ? Double.toString(rate) : "null", Double.toString(durationS), str(queue), str(queueType));
        return String.format(
                "{\"settings\":%s,\"elapsed_s\":%.3f,\"timed_out\":false,\"errors\":%s,\"published\":%d,"
                + "\"confirmed\":%d,\"nacked\":%d,\"consumed\":%d,\"publish_rate\":%.1f,\"confirm_rate\":%.1f,"
                + "\"consume_rate\":%.1f,\"confirm_latency_us\":%s,\"e2e_latency_us\":%s}",
                settings, elapsed, errs, published.get(), confirmed.get(), nacked.get(), consumed.get(),
                published.get() / durationS, confirmed.get() / durationS, consumed.get() / durationS,
                confirm > 0 ? latencyJson(confirmLat) : "null", latencyJson(e2eLat));
    }

    int execute() throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(uri);
        f.setAutomaticRecoveryEnabled(false);
        List<Connection> conns = new ArrayList<>();
        try {
            try (Connection c = f.newConnection("perftest setup")) {
                Channel ch = c.createChannel();
                Map<String, Object> args = new HashMap<>();
                if (!queueType.isEmpty()) args.put("x-queue-type", queueType);
                ch.queueDeclare(queue, persistent || queueType.equals("quorum"), false, false, args);
                ch.queuePurge(queue);
            }
            CountDownLatch ready = new CountDownLatch(producers + consumers), go = new CountDownLatch(1);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < consumers; i++) {
                Connection c = f.newConnection("perftest consumer " + i);
                conns.add(c);
                consumer(c.createChannel(), ready);
            }
            for (int i = 0; i < producers; i++) {
                Connection c = f.newConnection("perftest producer " + i);
                conns.add(c);
                Channel ch = c.createChannel();
                Thread t = new Thread(() -> producer(ch, ready, go), "producer-" + i);
                t.start();
                threads.add(t);
            }
            ready.await();
            startNs = nowNs();
            deadlineNs = startNs + (long) (durationS * 1e9);
            go.countDown();
            for (Thread t : threads) t.join();
            long left = deadlineNs - nowNs();
            if (left > 0) TimeUnit.NANOSECONDS.sleep(left);
            for (Longs l : e2eHolders) { synchronized (l) { e2eLat.add(l.done()); } }
            double elapsed = (nowNs() - startNs) / 1e9;
            System.out.println(json(elapsed));
        } catch (Exception e) {
            errors.add(describe(e));
            System.out.println(json(0));
        } finally {
            for (Connection c : conns) {
                try { c.close(2000); } catch (Exception ignored) { }
            }
        }
        return errors.isEmpty() ? 0 : 1;
    }

    public static void main(String[] argv) throws Exception {
        PerfTest p = new PerfTest();
        try {
            for (int i = 0; i < argv.length; i++) {
                String k = argv[i];
                if (k.equals("--persistent")) { p.persistent = true; continue; }
                if (k.equals("--auto-ack")) { p.autoAck = true; continue; }
                if (i + 1 >= argv.length) throw new IllegalArgumentException(k + " needs a value");
                String v = argv[++i];
                switch (k) {
                    case "--uri": p.uri = v; break;
                    case "--producers": p.producers = Integer.parseInt(v); break;
                    case "--consumers": p.consumers = Integer.parseInt(v); break;
                    case "--size": p.size = Integer.parseInt(v); break;
                    case "--confirm": p.confirm = Integer.parseInt(v); break;
                    case "--prefetch": p.prefetch = Integer.parseInt(v); break;
                    case "--multi-ack": p.multiAck = Integer.parseInt(v); break;
                    case "--rate": p.rate = Double.parseDouble(v); break;
                    case "--duration": p.durationS = Double.parseDouble(v); break;
                    case "--queue": p.queue = v; break;
                    case "--queue-type": p.queueType = v; break;
                    default: throw new IllegalArgumentException("unknown flag " + k);
                }
            }
            if (p.producers < 0 || p.consumers < 0 || p.producers + p.consumers == 0 || p.size < 0
                    || p.confirm < 0 || p.prefetch < 0 || p.prefetch > 65535 || p.multiAck < 1
                    || !(p.durationS > 0) || p.rate < 0) {
                throw new IllegalArgumentException("bad arguments");
            }
        } catch (IllegalArgumentException e) {
            System.err.println("PerfTest: " + e.getMessage());
            System.exit(2);
        }
        System.exit(p.execute());
    }
}

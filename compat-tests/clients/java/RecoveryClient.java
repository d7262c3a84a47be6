// A RabbitMQ Java client program for the client-recovery test
// (compat-tests/tests/client_recovery.rs): it connects with the list of every
// node's address, automatic recovery and topology recovery on (the client's
// defaults, set explicitly here), and publishes persistent messages with
// confirms while it consumes them, until the file DIR/stop appears. The test
// kills the master meanwhile; the client must reconnect by itself.
//
// Topology: a durable direct exchange, a durable queue bound to it (the
// checked queue, consumed with manual acks), and a server-named exclusive
// queue bound to it too (the "tap", consumed with auto-ack): a node failure
// loses the tap, so messages reaching it after a failover prove that topology
// recovery declared it again, with its binding and its consumer.
//
// Files written in DIR, one line each, flushed as written:
//   confirmed  the id of every message whose batch was fully confirmed, with no
//              connection loss in between (a batch with a loss is published again)
//   consumed   every id delivered on the checked queue (written before the ack)
//   tap        every id delivered on the tap queue
//   events     connected/shutdown/recovery events and the final summary
//
// Usage: java RecoveryClient DIR QUEUE HOST:PORT,HOST:PORT,...
import com.rabbitmq.client.*;
import java.io.*;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

public class RecoveryClient {
    static final String EXCHANGE = "recovery.java";
    static final int BATCH = 100;

    /** An append-only file of lines, flushed after every write. */
    static final class Lines {
        private final Writer out;

        Lines(Path p) throws IOException {
            out = Files.newBufferedWriter(p, StandardCharsets.UTF_8);
        }

        synchronized void line(String s) {
            try {
                out.write(s);
                out.write('\n');
                out.flush();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    static long idOf(byte[] body) {
        return ByteBuffer.wrap(body).getLong();
    }

    public static void main(String[] args) throws Exception {
        Path dir = Paths.get(args[0]);
        String queue = args[1];
        List<Address> addresses = new ArrayList<>();
        for (String hp : args[2].split(",")) {
            addresses.add(Address.parseAddress(hp));
        }
        Lines confirmedLog = new Lines(dir.resolve("confirmed"));
        Lines consumedLog = new Lines(dir.resolve("consumed"));
        Lines tapLog = new Lines(dir.resolve("tap"));
        Lines events = new Lines(dir.resolve("events"));

        ConnectionFactory cf = new ConnectionFactory();
        cf.setUsername("guest");
        cf.setPassword("guest");
        cf.setVirtualHost("/");
        cf.setAutomaticRecoveryEnabled(true);
        cf.setTopologyRecoveryEnabled(true);
        cf.setNetworkRecoveryInterval(250);
        cf.setConnectionTimeout(5000);
        cf.setRequestedHeartbeat(5);

        Connection conn = cf.newConnection(addresses, "recovery-java");
        events.line("connected " + conn.getPort());
        // Bumped on every loss of the underlying connection: a batch that saw
        // one is not counted as confirmed, whatever waitForConfirms says (a
        // recovered channel knows nothing of what its predecessor sent).
        AtomicInteger generation = new AtomicInteger();
        conn.addShutdownListener(cause -> {
            generation.incrementAndGet();
            events.line("shutdown " + cause.getMessage());
        });
        ((Recoverable) conn).addRecoveryListener(new RecoveryListener() {
            public void handleRecovery(Recoverable r) {
                generation.incrementAndGet();
                events.line("recovered " + ((Connection) r).getPort());
            }

            public void handleRecoveryStarted(Recoverable r) {
                events.line("recovery-started");
            }
        });

        Set<Long> consumed = ConcurrentHashMap.newKeySet();
        Channel cch = conn.createChannel();
        cch.basicQos(200);
        cch.exchangeDeclare(EXCHANGE, BuiltinExchangeType.DIRECT, true);
        cch.queueDeclare(queue, true, false, false, null);
        cch.queueBind(queue, EXCHANGE, queue);
        String tap = cch.queueDeclare().getQueue();
        cch.queueBind(tap, EXCHANGE, queue);
        cch.basicConsume(queue, false, new DefaultConsumer(cch) {
            @Override
            public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body)
                    throws IOException {
                long id = idOf(body);
                consumedLog.line(Long.toString(id));
                consumed.add(id);
                try {
                    getChannel().basicAck(env.getDeliveryTag(), false);
                } catch (IOException | ShutdownSignalException e) {
                    // The connection broke under the ack (the master was
                    // killed): the delivery comes again after recovery. Thrown
                    // on, the client's exception handler would close the
                    // connection itself (541), and an application's close is
                    // one automatic recovery does not undo.
                }
            }
        });
        cch.basicConsume(tap, true, new DefaultConsumer(cch) {
            @Override
            public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                tapLog.line(Long.toString(idOf(body)));
            }
        });

        Channel pch = conn.createChannel();
        pch.confirmSelect();
        Path stop = dir.resolve("stop");
        Set<Long> confirmed = new HashSet<>();
        long next = 0;
        long nacks = 0;
        long failures = 0;
        while (!Files.exists(stop)) {
            int gen = generation.get();
            try {
                for (long id = next; id < next + BATCH; id++) {
                    byte[] body = ByteBuffer.allocate(8).putLong(id).array();
                    pch.basicPublish(EXCHANGE, queue, MessageProperties.PERSISTENT_BASIC, body);
                }
                boolean acked = pch.waitForConfirms(30_000);
                if (!acked) {
                    nacks++;
                    continue;
                }
                if (generation.get() != gen) {
                    continue;
                }
                for (long id = next; id < next + BATCH; id++) {
                    confirmed.add(id);
                    confirmedLog.line(Long.toString(id));
                }
                next += BATCH;
            } catch (Exception e) {
                // The connection is down (or the confirms never came): wait
                // for the client's own recovery, then publish the batch again.
                failures++;
                events.line("publish failed: " + e);
                Thread.sleep(100);
            }
        }
        // Drain: every confirmed message must reach the recovered consumer.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!consumed.containsAll(confirmed) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        long missing = confirmed.stream().filter(id -> !consumed.contains(id)).count();
        events.line("summary confirmed=" + confirmed.size() + " consumed=" + consumed.size()
                + " missing=" + missing + " nacks=" + nacks + " failures=" + failures);
        conn.close(5_000);
        events.line("done");
    }
}

package org.amqpconformance.shim;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.qpid.protonj2.client.Client;
import org.apache.qpid.protonj2.client.ClientOptions;
import org.apache.qpid.protonj2.client.Connection;
import org.apache.qpid.protonj2.client.ConnectionOptions;
import org.apache.qpid.protonj2.client.Delivery;
import org.apache.qpid.protonj2.client.DeliveryMode;
import org.apache.qpid.protonj2.client.DeliveryState;
import org.apache.qpid.protonj2.client.DisconnectionEvent;
import org.apache.qpid.protonj2.client.ErrorCondition;
import org.apache.qpid.protonj2.client.Link;
import org.apache.qpid.protonj2.client.Message;
import org.apache.qpid.protonj2.client.Modified;
import org.apache.qpid.protonj2.client.Receiver;
import org.apache.qpid.protonj2.client.ReceiverOptions;
import org.apache.qpid.protonj2.client.Rejected;
import org.apache.qpid.protonj2.client.Sender;
import org.apache.qpid.protonj2.client.SenderOptions;
import org.apache.qpid.protonj2.client.Tracker;
import org.apache.qpid.protonj2.client.exceptions.ClientConnectionRemotelyClosedException;
import org.apache.qpid.protonj2.client.exceptions.ClientIOException;
import org.apache.qpid.protonj2.client.exceptions.ClientLinkRemotelyClosedException;
import org.apache.qpid.protonj2.client.exceptions.ClientOperationTimedOutException;
import org.apache.qpid.protonj2.client.exceptions.ClientResourceRemotelyClosedException;
import org.apache.qpid.protonj2.client.exceptions.ClientSessionRemotelyClosedException;
import org.apache.qpid.protonj2.engine.DeliveryTagGenerator;
import org.apache.qpid.protonj2.engine.impl.ProtonDeliveryTagGenerator;
import org.apache.qpid.protonj2.types.DeliveryTag;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;

/**
 * The amqp-conformance client shim for the Apache Qpid ProtonJ2 client (the contract: peers/shims/README.md).
 *
 * Commands come one JSON object a line on standard input; replies and events go one JSON object a line to
 * standard output, and nothing else does (System.out is pointed at standard error, so is the library's
 * logging). The shim never judges: it reports what the library's API told it.
 */
public final class ProtonJ2Shim {

    private static final String CLIENT = "protonj2";
    private static final String LIBRARY = "org.apache.qpid:protonj2-client";
    private static final String LANGUAGE = "java";

    /** The generator ClientSenderBuilder would pick itself, wrapped so the shim learns each tag it made. */
    private static final class TagRecorder implements DeliveryTagGenerator {
        private final DeliveryTagGenerator delegate;
        private volatile byte[] last;

        TagRecorder(boolean sendsSettled) {
            // ClientSenderBuilder.createSender: EMPTY for a settled sender, POOLED otherwise (protonj2 1.1.0)
            this.delegate = sendsSettled ? ProtonDeliveryTagGenerator.BUILTIN.EMPTY.createGenerator()
                                         : ProtonDeliveryTagGenerator.BUILTIN.POOLED.createGenerator();
        }

        @Override
        public DeliveryTag nextTag() {
            DeliveryTag tag = delegate.nextTag();
            last = tag.tagBytes().clone();
            return tag;
        }
    }

    private static final class LinkEntry {
        final String name;
        final Sender sender;
        final Receiver receiver;
        final boolean sendsSettled;
        final TagRecorder tags;

        LinkEntry(String name, Sender sender, Receiver receiver, boolean sendsSettled, TagRecorder tags) {
            this.name = name;
            this.sender = sender;
            this.receiver = receiver;
            this.sendsSettled = sendsSettled;
            this.tags = tags;
        }

        Link<?> link() {
            return sender != null ? sender : receiver;
        }
    }

    /** A command that ends in an error reply: its error object as the contract spells it. */
    private static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;
        final Map<String, Object> error;

        Failure(Map<String, Object> error) {
            super(String.valueOf(error.get("description")), null, false, false);
            this.error = error;
        }
    }

    private final PrintStream out;
    private final Gson gson = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();
    private final ExecutorService watchers = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "shim-settlement-watcher");
        thread.setDaemon(true);
        return thread;
    });
    private final Map<String, LinkEntry> links = new HashMap<>();
    private Client client;
    private volatile Connection connection;

    private ProtonJ2Shim(PrintStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        // The library logs through slf4j (slf4j-simple here): to standard error, warnings and worse unless told.
        setDefaultProperty("org.slf4j.simpleLogger.logFile", "System.err");
        setDefaultProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        PrintStream stdout = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err); // nothing but this shim's JSON lines reaches the real standard output

        ProtonJ2Shim shim = new ProtonJ2Shim(stdout);
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (!line.isBlank()) {
                    shim.handle(line);
                }
            }
        }
        shim.shutdown();
        stdout.flush();
        System.exit(0);
    }

    private static void setDefaultProperty(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    // ----- the conversation

    private void emit(Map<String, Object> object) {
        String line = gson.toJson(object);
        synchronized (out) {
            out.print(line);
            out.print('\n');
            out.flush();
        }
    }

    private void handle(String line) {
        JsonObject command;
        try {
            command = JsonParser.parseString(line).getAsJsonObject();
        } catch (RuntimeException e) {
            System.err.println("shim: not a JSON object, ignored: " + line);
            return;
        }
        Object id = command.has("id") ? fromJson(command.get("id")) : null;
        String op = string(command, "op");
        Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("id", id);
        reply.put("ok", true);
        try {
            if (op == null) {
                throw client("a command has an op");
            }
            switch (op) {
                case "hello" -> hello(reply);
                case "connect" -> connect(command, reply);
                case "attach" -> attach(command, reply);
                case "send" -> send(command, reply);
                case "receive" -> receive(command, reply);
                case "drain" -> drain(command, reply);
                case "detach" -> detach(command);
                case "close" -> close(command);
                default -> throw client("unknown op " + op);
            }
        } catch (Failure f) {
            reply = error(id, f.error);
        } catch (Throwable t) {
            String scope = op != null && List.of("attach", "send", "receive", "drain", "detach").contains(op) ? "link" : "connection";
            reply = error(id, classify(t, scope));
            System.err.println("shim: " + op + " failed: " + t);
        }
        emit(reply);
    }

    private static Map<String, Object> error(Object id, Map<String, Object> error) {
        Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("id", id);
        reply.put("ok", false);
        reply.put("error", error);
        return reply;
    }

    // ----- commands

    private void hello(Map<String, Object> reply) {
        reply.put("client", CLIENT);
        reply.put("library", LIBRARY);
        reply.put("version", libraryVersion());
        reply.put("language", LANGUAGE);
    }

    private void connect(JsonObject command, Map<String, Object> reply) throws Exception {
        if (connection != null) {
            throw client("connect: a connection is open; close it first");
        }
        long timeout = timeout(command);
        String url = string(command, "url");
        if (url == null) {
            throw client("connect: no url");
        }
        URI uri = new URI(url);
        boolean tls = "amqps".equalsIgnoreCase(uri.getScheme());
        String host = uri.getHost();
        int port = uri.getPort() >= 0 ? uri.getPort() : (tls ? 5671 : 5672);

        ConnectionOptions options = new ConnectionOptions();
        options.sslEnabled(tls);
        options.openTimeout(timeout);
        String userInfo = uri.getRawUserInfo();
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            options.user(decode(colon < 0 ? userInfo : userInfo.substring(0, colon)));
            if (colon >= 0) {
                options.password(decode(userInfo.substring(colon + 1)));
            }
        }
        String hostname = string(command, "hostname");
        if (hostname != null) {
            options.virtualHost(hostname);
        }
        options.disconnectedHandler(this::onDisconnected);

        Client newClient = Client.create(new ClientOptions().id(string(command, "container_id")));
        Connection newConnection = null;
        try {
            newConnection = newClient.connect(host, port, options);
            newConnection.openFuture().get(timeout, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            if (newConnection != null) {
                newConnection.closeAsync();
            }
            newClient.closeAsync();
            throw e;
        }
        client = newClient;
        connection = newConnection;
        links.clear();
        reply.put("remote_container", null); // the Connection API does not expose the remote container-id
    }

    private void attach(JsonObject command, Map<String, Object> reply) throws Exception {
        Connection conn = requireConnection();
        String name = string(command, "link");
        if (name == null) {
            throw client("attach: no link name");
        }
        if (links.containsKey(name)) {
            throw client("attach: link " + name + " is attached already");
        }
        String role = string(command, "role");
        if (!"sender".equals(role) && !"receiver".equals(role)) {
            throw client("attach: role is sender or receiver, not " + role);
        }
        String address = string(command, "address");
        long timeout = timeout(command);

        String rcvSettleMode = string(command, "rcv_settle_mode");
        if (rcvSettleMode != null && !"first".equals(rcvSettleMode)) {
            throw unsupported("rcv_settle_mode " + rcvSettleMode + ": LinkOptions.deliveryMode() offers only "
                + "AT_MOST_ONCE (snd settled, rcv first) and AT_LEAST_ONCE (snd unsettled, rcv first)");
        }
        String sndSettleMode = string(command, "snd_settle_mode");
        DeliveryMode mode;
        if (sndSettleMode == null || "unsettled".equals(sndSettleMode)) {
            mode = DeliveryMode.AT_LEAST_ONCE;
        } else if ("settled".equals(sndSettleMode)) {
            mode = DeliveryMode.AT_MOST_ONCE;
        } else {
            throw unsupported("snd_settle_mode " + sndSettleMode + ": LinkOptions.deliveryMode() offers only "
                + "AT_MOST_ONCE (snd settled) and AT_LEAST_ONCE (snd unsettled)");
        }
        boolean sendsSettled = mode == DeliveryMode.AT_MOST_ONCE;

        LinkEntry entry;
        if ("sender".equals(role)) {
            TagRecorder tags = new TagRecorder(sendsSettled);
            SenderOptions options = new SenderOptions().deliveryMode(mode).openTimeout(timeout)
                .deliveryTagGeneratorSupplier(() -> tags);
            entry = new LinkEntry(name, conn.openSender(address, options), null, sendsSettled, tags);
        } else {
            // creditWindow 0: no prefetch of the library's own; receive grants the credit it asks for, and drain
            // may drain any such receiver (the attach's drains field is not needed)
            ReceiverOptions options = new ReceiverOptions().deliveryMode(mode).openTimeout(timeout)
                .autoAccept(false).creditWindow(0);
            entry = new LinkEntry(name, null, conn.openReceiver(address, options), sendsSettled, null);
        }
        try {
            entry.link().openFuture().get(timeout, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            entry.link().closeAsync();
            throw e;
        }
        links.put(name, entry);
        // the client API exposes neither settle mode of the peer's attach
        reply.put("remote_snd_settle_mode", null);
        reply.put("remote_rcv_settle_mode", null);
    }

    private void send(JsonObject command, Map<String, Object> reply) throws Exception {
        LinkEntry entry = link(command);
        if (entry.sender == null) {
            throw client("send: link " + entry.name + " is a receiver");
        }
        long timeout = timeout(command);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeout);
        JsonArray messages = command.has("messages") && command.get("messages").isJsonArray()
            ? command.getAsJsonArray("messages") : new JsonArray();
        List<String> bodies = new ArrayList<>();
        for (JsonElement element : messages) {
            JsonObject message = element.getAsJsonObject();
            boolean settled = bool(message, "settled", false);
            if (settled != entry.sendsSettled) {
                throw unsupported("a " + (settled ? "pre-settled" : "unsettled") + " message on a link attached with "
                    + (entry.sendsSettled ? "DeliveryMode.AT_MOST_ONCE" : "DeliveryMode.AT_LEAST_ONCE")
                    + ": Sender.send() settles each message by the link's DeliveryMode, never per message");
            }
            bodies.add(string(message, "body"));
        }

        List<Tracker> trackers = new ArrayList<>();
        List<String> tags = new ArrayList<>();
        for (int i = 0; i < bodies.size(); i++) {
            Message<String> message = Message.create(bodies.get(i));
            Tracker tracker;
            while (true) {
                entry.tags.last = null;
                // trySend sends only with credit, so a send that times out here leaves nothing queued behind
                tracker = entry.sender.trySend(message);
                if (tracker != null) {
                    break;
                }
                if (System.nanoTime() - deadline >= 0) {
                    throw timeout(i + " of " + bodies.size() + " messages sent within " + timeout
                        + " ms (Sender.trySend() found no credit)");
                }
                Thread.sleep(2);
            }
            trackers.add(tracker);
            tags.add(hex(entry.tags.last));
        }

        List<Map<String, Object>> deliveries = new ArrayList<>();
        for (int i = 0; i < trackers.size(); i++) {
            Tracker tracker = trackers.get(i);
            String api;
            boolean watch = false;
            if (entry.sendsSettled) {
                api = "Sender.trySend() returned (sent settled); Tracker.remoteState()";
            } else {
                try {
                    Future<Tracker> settlement = tracker.settlementFuture();
                    long remaining = remainingMillis(deadline);
                    if (remaining <= 0 && !settlement.isDone()) {
                        // ClientFuture.get() with no time left returns null at once rather than throwing
                        throw new TimeoutException();
                    }
                    settlement.get(Math.max(1, remaining), TimeUnit.MILLISECONDS);
                    api = "Tracker.settlementFuture() completed; Tracker.remoteState()";
                    if (tracker.remoteSettled()) {
                        awaitLocalSettlement(tracker);
                    }
                } catch (TimeoutException e) {
                    api = "Tracker.settlementFuture() not done within timeout_ms; Tracker.remoteState()";
                    watch = true;
                } catch (ExecutionException e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    Map<String, Object> told = classify(cause, "link");
                    if (cause instanceof ClientConnectionRemotelyClosedException
                            || (cause instanceof ClientLinkRemotelyClosedException
                                || cause instanceof ClientSessionRemotelyClosedException)
                               && "amqp".equals(told.get("kind"))) {
                        // the API told the broker's detach or end with its error, or its close or the loss of the
                        // connection, through this delivery's future: the send waited when it came, so it fails
                        // with it (the disconnectedHandler may tell a connection's end again, as an event, when it
                        // runs before the shim is asked to close)
                        throw new Failure(told);
                    }
                    api = "Tracker.settlementFuture() failed: " + cause.getClass().getSimpleName() + ": " + cause.getMessage();
                }
            }
            Map<String, Object> report = new LinkedHashMap<>();
            report.put("index", i);
            report.put("tag", tags.get(i));
            report.put("remote_state", stateJson(tracker.remoteState()));
            report.put("remote_settled", tracker.remoteSettled());
            report.put("locally_settled", tracker.settled());
            report.put("api", api);
            deliveries.add(report);
            if (watch) {
                watchSettlement(entry.name, i, tracker);
            }
        }
        reply.put("deliveries", deliveries);
    }

    /** The sender settles by itself once the peer has (SenderOptions.autoSettle, on by default); wait for it briefly. */
    private static void awaitLocalSettlement(Tracker tracker) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
        while (!tracker.settled() && System.nanoTime() - until < 0) {
            Thread.sleep(1);
        }
    }

    /** After the reply: a delivery-update event when the library reports the peer settled it. */
    private void watchSettlement(String linkName, int index, Tracker tracker) {
        Connection conn = connection;
        watchers.submit(() -> {
            try {
                tracker.settlementFuture().get();
                if (tracker.remoteSettled()) {
                    awaitLocalSettlement(tracker);
                }
                if (connection != conn) {
                    return;
                }
                Map<String, Object> event = new LinkedHashMap<>();
                event.put("event", "delivery-update");
                event.put("link", linkName);
                event.put("index", index);
                event.put("remote_state", stateJson(tracker.remoteState()));
                event.put("remote_settled", tracker.remoteSettled());
                emit(event);
            } catch (ExecutionException e) {
                System.err.println("shim: link " + linkName + " delivery " + index + ": settlement failed: " + e.getCause());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
    }

    private void receive(JsonObject command, Map<String, Object> reply) throws Exception {
        LinkEntry entry = link(command);
        if (entry.receiver == null) {
            throw client("receive: link " + entry.name + " is a sender");
        }
        long timeout = timeout(command);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeout);
        int count = command.has("count") ? command.get("count").getAsInt() : 1;
        boolean settle = bool(command, "settle", true);
        JsonObject outcome = command.has("outcome") && command.get("outcome").isJsonObject()
            ? command.getAsJsonObject("outcome") : null;
        DeliveryState state = outcome != null ? outcome(outcome) : null;

        Receiver receiver = entry.receiver;
        int credit = count - (int) receiver.queuedDeliveries();
        if (credit > 0) {
            receiver.addCredit(credit);
        }

        List<Map<String, Object>> deliveries = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            long remaining = remainingMillis(deadline);
            if (remaining <= 0) {
                break;
            }
            Delivery delivery = receiver.receive(remaining, TimeUnit.MILLISECONDS);
            if (delivery == null) {
                break;
            }
            boolean settledOnArrival = delivery.remoteSettled();
            Message<Object> message = delivery.message();
            if (state != null) {
                delivery.disposition(state, settle);
            } else if (settle) {
                delivery.settle();
            }
            // Delivery.disposition() hands the work to the connection's event loop and returns; adding no
            // credit is a request through that same loop that writes nothing, so once it returns the
            // disposition has been applied and state()/settled() show it.
            receiver.addCredit(0);

            Map<String, Object> report = new LinkedHashMap<>();
            report.put("index", i);
            report.put("body", bodyString(message.body()));
            report.put("tag", null); // Delivery does not expose the delivery tag
            report.put("settled_on_arrival", settledOnArrival);
            report.put("delivery_count", message.deliveryCount());
            report.put("first_acquirer", message.firstAcquirer());
            report.put("disposed", stateJson(delivery.state()));
            report.put("locally_settled", delivery.settled());
            report.put("remote_settled", delivery.remoteSettled());
            deliveries.add(report);
        }
        if (deliveries.size() < count) {
            throw timeout(deliveries.size() + " of " + count + " messages within " + timeout + " ms");
        }
        reply.put("deliveries", deliveries);
    }

    /**
     * Receiver.addCredit(credit), then Receiver.drain(), and the reply once the Future it returns completes: the
     * library completes it when a flow from the broker (or a transfer) leaves the link's credit at 0 (protonj2
     * 1.1.0 ClientReceiverLinkType.handleReceiverCreditUpdated). A message that arrives meanwhile stays in the
     * receiver's delivery queue: the shim takes none, so none is disposed of or settled.
     */
    private void drain(JsonObject command, Map<String, Object> reply) throws Exception {
        LinkEntry entry = link(command);
        if (entry.receiver == null) {
            throw client("drain: link " + entry.name + " is a sender");
        }
        JsonElement given = command.get("credit");
        int credit;
        try {
            credit = given == null || given.isJsonNull() ? 0 : given.getAsInt();
        } catch (RuntimeException e) {
            credit = 0;
        }
        if (credit < 1) {
            throw client("drain: credit is an integer of 1 or more, not " + given);
        }
        long timeout = timeout(command);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeout);

        Receiver receiver = entry.receiver;
        receiver.addCredit(credit);
        Future<Receiver> drained = receiver.drain();
        try {
            long remaining = remainingMillis(deadline);
            if (remaining <= 0 && !drained.isDone()) {
                // ClientFuture.get() with no time left returns null at once rather than throwing
                throw new TimeoutException();
            }
            drained.get(Math.max(1, remaining), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw timeout("the Receiver.drain() future was not done within " + timeout + " ms");
        } catch (ExecutionException e) {
            throw new Failure(classify(e.getCause() != null ? e.getCause() : e, "link"));
        }
        reply.put("api", "Receiver.drain() future completed");
        reply.put("credit", null); // the client API does not expose the link's credit
    }

    private void detach(JsonObject command) throws Exception {
        LinkEntry entry = link(command);
        links.remove(entry.name);
        long timeout = timeout(command);
        Future<?> done = bool(command, "close", false) ? entry.link().closeAsync() : entry.link().detachAsync();
        done.get(timeout, TimeUnit.MILLISECONDS);
    }

    private void close(JsonObject command) throws Exception {
        Connection conn = requireConnection();
        long timeout = timeout(command);
        Client oldClient = client;
        connection = null;
        client = null;
        links.clear();
        try {
            conn.closeAsync().get(timeout, TimeUnit.MILLISECONDS);
        } finally {
            oldClient.closeAsync();
        }
    }

    private void shutdown() {
        Connection conn = connection;
        connection = null;
        links.clear();
        if (conn != null) {
            try {
                conn.closeAsync().get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("shim: closing the connection at the end of input: " + e);
            }
        }
        if (client != null) {
            try {
                client.closeAsync().get(5, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("shim: closing the client at the end of input: " + e);
            }
        }
        watchers.shutdownNow();
    }

    // ----- events

    private void onDisconnected(Connection conn, DisconnectionEvent event) {
        if (conn != connection) {
            return; // a connection the shim is closing, or one whose connect failed (its reply says so)
        }
        ClientIOException cause = event.failureCause();
        Map<String, Object> report = new LinkedHashMap<>();
        ErrorCondition condition = cause instanceof ClientConnectionRemotelyClosedException remote
            ? remote.getErrorCondition() : null;
        if (condition != null && condition.condition() != null) {
            report.put("event", "error");
            report.put("scope", "connection");
            report.put("condition", condition.condition());
            report.put("description", condition.description());
        } else {
            report.put("event", cause instanceof ClientConnectionRemotelyClosedException ? "remote-close" : "error");
            report.put("scope", "connection");
            report.put("condition", null);
            report.put("description", cause == null ? null : cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        System.err.println("shim: ConnectionOptions.disconnectedHandler: " + cause);
        emit(report);
    }

    // ----- errors

    private static Map<String, Object> classify(Throwable t, String scope) {
        Throwable cause = t;
        while ((cause instanceof ExecutionException || cause instanceof java.util.concurrent.CompletionException)
               && cause.getCause() != null) {
            cause = cause.getCause();
        }
        Map<String, Object> error = new LinkedHashMap<>();
        if (cause instanceof TimeoutException || cause instanceof ClientOperationTimedOutException) {
            error.put("kind", "timeout");
            error.put("description", cause.getClass().getSimpleName() + ": " + cause.getMessage());
            return error;
        }
        ErrorCondition condition = null;
        String where = scope;
        if (cause instanceof ClientConnectionRemotelyClosedException e) {
            condition = e.getErrorCondition();
            where = "connection";
        } else if (cause instanceof ClientLinkRemotelyClosedException e) {
            condition = e.getErrorCondition();
            where = "link";
        } else if (cause instanceof ClientSessionRemotelyClosedException e) {
            condition = e.getErrorCondition();
            where = "session";
        } else if (cause instanceof ClientResourceRemotelyClosedException e) {
            condition = e.getErrorCondition();
        }
        if (condition != null && condition.condition() != null) {
            error.put("kind", "amqp");
            error.put("scope", where);
            error.put("condition", condition.condition());
            error.put("description", condition.description());
        } else {
            error.put("kind", "client");
            error.put("description", cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        return error;
    }

    private static Failure client(String description) {
        return failure("client", description);
    }

    private static Failure unsupported(String description) {
        return failure("unsupported", description);
    }

    private static Failure timeout(String description) {
        return failure("timeout", description);
    }

    private static Failure failure(String kind, String description) {
        Map<String, Object> error = new LinkedHashMap<>();
        error.put("kind", kind);
        error.put("description", description);
        return new Failure(error);
    }

    // ----- helpers

    private Connection requireConnection() throws Failure {
        Connection conn = connection;
        if (conn == null) {
            throw client("no connection: connect first");
        }
        return conn;
    }

    private LinkEntry link(JsonObject command) throws Failure {
        requireConnection();
        String name = string(command, "link");
        LinkEntry entry = links.get(name);
        if (entry == null) {
            throw client("unknown link " + name);
        }
        return entry;
    }

    private static DeliveryState outcome(JsonObject outcome) throws Failure {
        String type = string(outcome, "type");
        if (type == null) {
            throw client("an outcome has a type");
        }
        switch (type) {
            case "accepted":
                return DeliveryState.accepted();
            case "released":
                return DeliveryState.released();
            case "rejected": {
                String condition = string(outcome, "condition");
                String description = string(outcome, "description");
                Object info = outcome.has("info") ? fromJson(outcome.get("info")) : null;
                if (info instanceof Map<?, ?> map) {
                    return DeliveryState.rejected(condition, description, stringKeyed(map));
                }
                return DeliveryState.rejected(condition, description);
            }
            case "modified": {
                boolean failed = bool(outcome, "delivery_failed", false);
                boolean undeliverable = bool(outcome, "undeliverable_here", false);
                Object annotations = outcome.has("message_annotations") ? fromJson(outcome.get("message_annotations")) : null;
                if (annotations instanceof Map<?, ?> map) {
                    return DeliveryState.modified(failed, undeliverable, stringKeyed(map));
                }
                return DeliveryState.modified(failed, undeliverable);
            }
            default:
                throw client("unknown outcome type " + type);
        }
    }

    private static Map<String, Object> stateJson(DeliveryState state) {
        if (state == null) {
            return null;
        }
        Map<String, Object> json = new LinkedHashMap<>();
        switch (state.getType()) {
            case ACCEPTED -> json.put("type", "accepted");
            case RELEASED -> json.put("type", "released");
            case REJECTED -> {
                Rejected rejected = (Rejected) state;
                json.put("type", "rejected");
                json.put("condition", rejected.getCondition());
                json.put("description", rejected.getDescription());
            }
            case MODIFIED -> {
                Modified modified = (Modified) state;
                json.put("type", "modified");
                json.put("delivery_failed", modified.isDeliveryFailed());
                json.put("undeliverable_here", modified.isUndeliverableHere());
                json.put("message_annotations", jsonable(modified.getMessageAnnotations()));
            }
            case TRANSACTIONAL -> json.put("type", "transactional");
        }
        return json;
    }

    private static String bodyString(Object body) {
        if (body == null || body instanceof String) {
            return (String) body;
        }
        if (body instanceof byte[] bytes) {
            return new String(bytes, StandardCharsets.UTF_8);
        }
        return String.valueOf(body);
    }

    /** A JSON value as Java: integers as Integer (Long when larger), other numbers as Double. */
    private static Object fromJson(JsonElement element) {
        if (element == null || element.isJsonNull()) {
            return null;
        }
        if (element.isJsonPrimitive()) {
            JsonPrimitive primitive = element.getAsJsonPrimitive();
            if (primitive.isBoolean()) {
                return primitive.getAsBoolean();
            }
            if (primitive.isString()) {
                return primitive.getAsString();
            }
            BigDecimal number = primitive.getAsBigDecimal();
            try {
                long value = number.longValueExact();
                return value == (int) value ? Integer.valueOf((int) value) : Long.valueOf(value);
            } catch (ArithmeticException notAnInteger) {
                return number.doubleValue();
            }
        }
        if (element.isJsonArray()) {
            List<Object> list = new ArrayList<>();
            for (JsonElement item : element.getAsJsonArray()) {
                list.add(fromJson(item));
            }
            return list;
        }
        Map<String, Object> map = new LinkedHashMap<>();
        for (Map.Entry<String, JsonElement> item : element.getAsJsonObject().entrySet()) {
            map.put(item.getKey(), fromJson(item.getValue()));
        }
        return map;
    }

    /** What the API gave, in types Gson writes as JSON (symbols and other AMQP types as their text). */
    private static Object jsonable(Object value) {
        if (value == null || value instanceof String || value instanceof Number || value instanceof Boolean) {
            return value;
        }
        if (value instanceof Map<?, ?> map) {
            Map<String, Object> json = new LinkedHashMap<>();
            map.forEach((k, v) -> json.put(String.valueOf(k), jsonable(v)));
            return json;
        }
        if (value instanceof Collection<?> collection) {
            List<Object> json = new ArrayList<>();
            collection.forEach(v -> json.add(jsonable(v)));
            return json;
        }
        if (value instanceof byte[] bytes) {
            return hex(bytes);
        }
        return String.valueOf(value);
    }

    private static Map<String, Object> stringKeyed(Map<?, ?> map) {
        Map<String, Object> result = new LinkedHashMap<>();
        map.forEach((k, v) -> result.put(String.valueOf(k), v));
        return result;
    }

    private static String string(JsonObject object, String key) {
        JsonElement element = object.get(key);
        return element == null || element.isJsonNull() ? null : element.getAsString();
    }

    private static boolean bool(JsonObject object, String key, boolean otherwise) {
        JsonElement element = object.get(key);
        return element == null || element.isJsonNull() ? otherwise : element.getAsBoolean();
    }

    private static long timeout(JsonObject command) {
        JsonElement element = command.get("timeout_ms");
        return element == null || element.isJsonNull() ? 10_000 : Math.max(1, element.getAsLong());
    }

    private static long remainingMillis(long deadline) {
        return Math.max(0, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
    }

    private static String hex(byte[] bytes) {
        if (bytes == null) {
            return null;
        }
        StringBuilder text = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            text.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return text.toString();
    }

    private static String decode(String text) {
        return URLDecoder.decode(text.replace("+", "%2B"), StandardCharsets.UTF_8);
    }

    /** The version in the library jar's own Maven metadata (kept in the shaded jar), else its manifest's. */
    private static String libraryVersion() {
        try (InputStream in = Client.class.getResourceAsStream(
                "/META-INF/maven/org.apache.qpid/protonj2-client/pom.properties")) {
            if (in != null) {
                Properties properties = new Properties();
                properties.load(in);
                String version = properties.getProperty("version");
                if (version != null) {
                    return version;
                }
            }
        } catch (Exception e) {
            System.err.println("shim: reading the library's pom.properties: " + e);
        }
        return Client.class.getPackage().getImplementationVersion();
    }
}

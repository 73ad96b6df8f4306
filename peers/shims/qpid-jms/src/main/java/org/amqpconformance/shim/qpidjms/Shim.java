package org.amqpconformance.shim.qpidjms;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.URI;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;

import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.apache.qpid.jms.JmsConnectionListener;
import org.apache.qpid.jms.JmsConnectionMetaData;
import org.apache.qpid.jms.JmsConnectionRemotelyClosedException;
import org.apache.qpid.jms.message.JmsInboundMessageDispatch;
import org.apache.qpid.jms.policy.JmsDefaultPresettlePolicy;
import org.apache.qpid.jms.provider.exceptions.ProviderConnectionRemotelyClosedException;
import org.apache.qpid.jms.provider.exceptions.ProviderDeliveryModifiedException;
import org.apache.qpid.jms.provider.exceptions.ProviderDeliveryReleasedException;

/**
 * amqp-conformance client shim for Apache Qpid JMS (peers/shims/README.md).
 *
 * It reads one JSON command a line on standard input, drives qpid-jms through the Jakarta Messaging API
 * (plus qpid-jms's own public JmsConnection / presettle policy / JMS_AMQP_ACK_TYPE extensions) and writes
 * one JSON reply a line (and events) on standard output. It reports what the API told it and never judges.
 */
public final class Shim {

    private static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();
    private static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    /** qpid-jms's vendor property that chooses the disposition Message.acknowledge() sends. */
    private static final String ACK_TYPE = "JMS_AMQP_ACK_TYPE";
    private static final int ACCEPTED = 1, REJECTED = 2, RELEASED = 3, MODIFIED_FAILED = 4,
            MODIFIED_FAILED_UNDELIVERABLE = 5;
    /** qpid-jms writes a peer's error condition as "description [condition = symbol]" (AmqpSupport.extractErrorMessage). */
    private static final Pattern CONDITION = Pattern.compile("(?s)^(.*) \\[condition = ([^\\]]*)\\]$");
    private static final String NO_DESCRIPTION = "Received error from remote peer without description";
    private static final long DEFAULT_TIMEOUT_MS = 10_000;
    /**
     * How long close waits for qpid-jms to tell that a link closed, where a send on it failed with an error its
     * exception cannot tell apart from a rejected outcome. qpid-jms fails the waiting send first and then tells
     * JmsConnectionListener.onProducerClosed from its connection executor; a connection closed before that task
     * runs drops the notice (JmsConnection.onResourceClosed does nothing once closing), so an application that
     * closes at once would never hear it, and whether the harness's close came first would be a race.
     */
    private static final long LINK_CLOSE_NOTICE_MS = 250;

    private final ExecutorService workers = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "shim-worker");
        t.setDaemon(true);
        return t;
    });

    /** How long past a command's deadline a library call may run before the shim answers hung. */
    private static final long HANG_GRACE_MS = 1_000;

    private JmsConnection connection;
    /** The call that outlived its deadline in the library, once one has: every later command is answered hung. */
    private volatile String hung;
    /** The link an attach command is creating: the peer may close it before createProducer/Consumer returns. */
    private volatile String attaching;
    private final Map<String, Link> links = new ConcurrentHashMap<>();

    /** One harness link: qpid-jms gets one JMS Session (one AMQP session) a link, see attach(). */
    private static final class Link {
        final String name;
        final boolean sender;
        final boolean presettle;
        final Session session;
        MessageProducer producer;
        MessageConsumer consumer;
        /** A send on it failed with an error that may be the link's own (see LINK_CLOSE_NOTICE_MS). */
        volatile boolean sendFailedUnclear;
        /** Counted down when qpid-jms tells this link (or its session) closed. */
        final CountDownLatch closeTold = new CountDownLatch(1);

        Link(String name, boolean sender, boolean presettle, Session session) {
            this.name = name;
            this.sender = sender;
            this.presettle = presettle;
            this.session = session;
        }
    }

    /** A reply that is not ok: thrown by command handlers. */
    private static class Failure extends Exception {
        final JsonObject error;

        Failure(JsonObject error) {
            super(error.toString(), null, false, false);
            this.error = error;
        }
    }

    /** A library call that had not returned within the command's timeout_ms: it goes on in its worker. */
    private static final class TimedOut extends Failure {
        final Future<?> call;

        TimedOut(long timeoutMs, Future<?> call) {
            super(error("timeout", "no answer from qpid-jms within " + timeoutMs + " ms"));
            this.call = call;
        }
    }

    public static void main(String[] args) throws Exception {
        // Standard output carries the JSON lines only: anything else that prints to System.out goes to stderr.
        System.setOut(System.err);
        Shim shim = new Shim();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonObject reply = shim.handleLine(line);
            write(reply);
        }
        if (shim.hung != null) {
            // the library still holds the call that hung: leave at once rather than wait on it
            log("end of input with a call still hung (" + shim.hung + "): exiting");
        } else {
            shim.shutdown();
        }
        System.exit(0);
    }

    static void write(JsonObject object) {
        String text = GSON.toJson(object);
        synchronized (OUT) {
            OUT.print(text);
            OUT.print('\n');
            OUT.flush();
        }
    }

    static void log(String text) {
        System.err.println("[qpid-jms shim] " + text);
    }

    private JsonObject handleLine(String line) {
        JsonObject reply = new JsonObject();
        JsonObject cmd;
        try {
            cmd = JsonParser.parseString(line).getAsJsonObject();
        } catch (RuntimeException e) {
            reply.add("id", JsonNull.INSTANCE);
            reply.addProperty("ok", false);
            reply.add("error", error("client", "not a JSON object: " + e.getMessage()));
            return reply;
        }
        reply.add("id", cmd.has("id") ? cmd.get("id") : JsonNull.INSTANCE);
        String op = str(cmd, "op");
        if (hung != null) { // a call still hangs in the library: nothing it holds can be trusted
            reply.addProperty("ok", false);
            reply.add("error", error("hung", "an earlier call still hangs in qpid-jms (" + hung
                    + "): the shim cannot go on"));
            return reply;
        }
        try {
            JsonObject result;
            switch (op == null ? "" : op) {
                case "hello": result = hello(); break;
                case "connect": result = connect(cmd); break;
                case "attach": result = attach(cmd); break;
                case "send": result = send(cmd); break;
                case "receive": result = receive(cmd); break;
                case "drain": result = drain(cmd); break;
                case "detach": result = detach(cmd); break;
                case "close": result = close(cmd); break;
                default: throw new Failure(error("client", "unknown op: " + op));
            }
            reply.addProperty("ok", true);
            for (Map.Entry<String, JsonElement> e : result.entrySet()) {
                reply.add(e.getKey(), e.getValue());
            }
        } catch (Failure f) {
            reply.addProperty("ok", false);
            reply.add("error", f.error);
        } catch (Throwable t) {
            log("unexpected: " + t);
            t.printStackTrace();
            reply.addProperty("ok", false);
            reply.add("error", error("client", describe(t)));
        }
        return reply;
    }

    // ----------------------------------------------------------------------------------------- commands

    private JsonObject hello() {
        JsonObject r = new JsonObject();
        r.addProperty("client", "qpid-jms");
        r.addProperty("library", "org.apache.qpid:qpid-jms-client");
        // ConnectionMetaData.getProviderVersion(): qpid-jms reads its own version at run time.
        r.addProperty("version", JmsConnectionMetaData.INSTANCE.getProviderVersion());
        r.addProperty("language", "java");
        return r;
    }

    private JsonObject connect(JsonObject cmd) throws Failure {
        if (connection != null) {
            throw new Failure(error("client", "already connected: close first"));
        }
        long timeout = timeout(cmd);
        String url = str(cmd, "url");
        if (url == null) {
            throw new Failure(error("client", "connect needs url"));
        }
        String containerId = str(cmd, "container_id");
        String hostname = str(cmd, "hostname");

        URI uri;
        try {
            uri = new URI(url);
        } catch (Exception e) {
            throw new Failure(error("client", describe(e)));
        }
        // qpid-jms takes amqp, amqps, amqpws and amqpwss URIs; the contract gives amqp://
        StringBuilder remote = new StringBuilder(uri.getScheme() == null ? "amqp" : uri.getScheme())
                .append("://").append(uri.getHost());
        if (uri.getPort() >= 0) {
            remote.append(':').append(uri.getPort());
        }
        // qpid-jms's URI options: how long it waits for TCP and for the peer's open; the open's hostname.
        remote.append("?transport.connectTimeout=").append(timeout).append("&jms.connectTimeout=").append(timeout);
        if (hostname != null) {
            remote.append("&amqp.vhost=").append(URLEncoder.encode(hostname, StandardCharsets.UTF_8));
        }
        JmsConnectionFactory factory = new JmsConnectionFactory(remote.toString());
        String userInfo = uri.getRawUserInfo();
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            String user = colon < 0 ? userInfo : userInfo.substring(0, colon);
            factory.setUsername(percentDecode(user));
            if (colon >= 0) {
                factory.setPassword(percentDecode(userInfo.substring(colon + 1)));
            }
        }

        final JmsConnection[] made = new JmsConnection[1];
        try {
            within(timeout, () -> {
                JmsConnection c = (JmsConnection) factory.createConnection();
                made[0] = c;
                c.setExceptionListener(this::onConnectionException);
                c.addConnectionListener(new LinkClosures());
                if (containerId != null) {
                    c.setClientID(containerId); // JMS's client ID is qpid-jms's AMQP container-id
                }
                c.start(); // sends open (when setClientID has not already) and lets consumers get credit
                return null;
            });
        } catch (Exception e) {
            closeWhenDone(e, () -> {
                if (made[0] != null) {
                    made[0].close();
                }
            });
            throw failure(e, "connection");
        }
        connection = made[0];
        links.clear();
        JsonObject r = new JsonObject();
        r.add("remote_container", JsonNull.INSTANCE); // the JMS API does not expose the peer's container-id
        return r;
    }

    private JsonObject attach(JsonObject cmd) throws Failure {
        requireConnection();
        long timeout = timeout(cmd);
        String name = str(cmd, "link");
        String role = str(cmd, "role");
        String address = str(cmd, "address");
        if (name == null || role == null || address == null) {
            throw new Failure(error("client", "attach needs link, role and address"));
        }
        if (links.containsKey(name)) {
            throw new Failure(error("client", "link already attached: " + name));
        }
        boolean sender;
        if (role.equals("sender")) {
            sender = true;
        } else if (role.equals("receiver")) {
            sender = false;
        } else {
            throw new Failure(error("client", "unknown role: " + role));
        }
        String sndMode = str(cmd, "snd_settle_mode");
        String rcvMode = str(cmd, "rcv_settle_mode");
        boolean presettle;
        if (sndMode == null || sndMode.equals("unsettled")) {
            presettle = false;
        } else if (sndMode.equals("settled")) {
            presettle = true;
        } else if (sndMode.equals("mixed")) {
            throw new Failure(error("unsupported", "qpid-jms attaches with snd-settle-mode settled (presettle policy on)"
                    + " or unsettled (off), never mixed: AmqpProducerBuilder/AmqpConsumerBuilder.createEndpoint"));
        } else {
            throw new Failure(error("client", "unknown snd_settle_mode: " + sndMode));
        }
        if (rcvMode != null && rcvMode.equals("second")) {
            throw new Failure(error("unsupported", "qpid-jms always attaches with rcv-settle-mode first;"
                    + " no API or URI option asks for second"));
        } else if (rcvMode != null && !rcvMode.equals("first")) {
            throw new Failure(error("client", "unknown rcv_settle_mode: " + rcvMode));
        }

        // A JMS Session copies the connection's presettle policy when it is created, and
        // Message.acknowledge() in CLIENT_ACKNOWLEDGE acknowledges every consumed message of its session:
        // so each link gets a session of its own, created under the policy its snd_settle_mode asks for.
        JmsDefaultPresettlePolicy policy = new JmsDefaultPresettlePolicy();
        if (sender) {
            policy.setPresettleProducers(presettle);
        } else {
            policy.setPresettleConsumers(presettle);
        }
        final Session[] made = new Session[1];
        final String[] step = {"session"};
        attaching = name;
        try {
            Link link = within(timeout, () -> {
                connection.setPresettlePolicy(policy);
                Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
                made[0] = session;
                step[0] = "link";
                Link l = new Link(name, sender, presettle, session);
                if (sender) {
                    l.producer = session.createProducer(session.createQueue(address));
                } else {
                    l.consumer = session.createConsumer(session.createQueue(address));
                }
                return l;
            });
            links.put(name, link);
        } catch (Exception e) {
            // a JMS application closes the session whose producer or consumer it could not create
            closeWhenDone(e, () -> {
                if (made[0] != null) {
                    made[0].close();
                }
            });
            throw failure(e, step[0]);
        } finally {
            attaching = null;
        }
        JsonObject r = new JsonObject();
        // the JMS API does not expose the modes of the peer's attach
        r.add("remote_snd_settle_mode", JsonNull.INSTANCE);
        r.add("remote_rcv_settle_mode", JsonNull.INSTANCE);
        return r;
    }

    /** What one send command's worker has done so far (shared with the command thread). */
    private static final class SendProgress {
        final List<JsonObject> reports = new ArrayList<>();
        int current = -1;
        boolean abandoned;
    }

    private JsonObject send(JsonObject cmd) throws Failure {
        Link link = link(cmd, true);
        long timeout = timeout(cmd);
        JsonArray messages = cmd.has("messages") ? cmd.getAsJsonArray("messages") : new JsonArray();
        List<String> bodies = new ArrayList<>();
        for (JsonElement m : messages) {
            JsonObject msg = m.getAsJsonObject();
            boolean settled = msg.has("settled") && msg.get("settled").getAsBoolean();
            if (settled != link.presettle) {
                throw new Failure(error("unsupported", "qpid-jms settles a producer's messages by its link:"
                        + " every message pre-settled on a link attached snd-settle-mode settled (presettle policy),"
                        + " none on one attached unsettled; link " + link.name + " sends "
                        + (link.presettle ? "pre-settled only" : "unsettled only")));
            }
            bodies.add(str(msg, "body"));
        }

        SendProgress progress = new SendProgress();
        Future<?> worker = workers.submit(() -> sendAll(link, bodies, progress));
        try {
            worker.get(timeout, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            // reported below: the message whose send() has not returned, and those not sent after it
        } catch (InterruptedException | ExecutionException e) {
            throw new Failure(error("client", describe(e.getCause() == null ? e : e.getCause())));
        }
        JsonArray deliveries = new JsonArray();
        synchronized (progress) {
            progress.abandoned = true;
            for (JsonObject r : progress.reports) {
                deliveries.add(r);
            }
            for (int i = progress.reports.size(); i < bodies.size(); i++) {
                JsonObject r = report(i);
                r.add("remote_state", JsonNull.INSTANCE);
                r.add("remote_settled", JsonNull.INSTANCE);
                r.add("locally_settled", JsonNull.INSTANCE);
                r.addProperty("api", i == progress.current
                        ? "MessageProducer.send() had not returned within " + timeout + " ms"
                        : "not sent: MessageProducer.send() of message " + progress.current + " had not returned within "
                        + timeout + " ms");
                deliveries.add(r);
            }
        }
        JsonObject r = new JsonObject();
        r.add("deliveries", deliveries);
        return r;
    }

    private void sendAll(Link link, List<String> bodies, SendProgress progress) {
        for (int i = 0; i < bodies.size(); i++) {
            synchronized (progress) {
                if (progress.abandoned) {
                    return;
                }
                progress.current = i;
            }
            JsonObject r = report(i);
            try {
                TextMessage message = link.session.createTextMessage(bodies.get(i));
                // PERSISTENT (the JMS default) makes qpid-jms send synchronously: send() returns once the
                // peer's disposition is accepted; other outcomes throw. A pre-settled send returns once written.
                link.producer.send(message);
                if (link.presettle) {
                    r.add("remote_state", JsonNull.INSTANCE);
                    r.addProperty("api", "MessageProducer.send() returned (pre-settled producer)");
                } else {
                    r.add("remote_state", state("accepted"));
                    r.addProperty("api", "MessageProducer.send() returned");
                }
            } catch (Exception e) {
                JsonElement state = stateFromSendException(e);
                r.add("remote_state", state);
                r.addProperty("api", describe(e));
                // a state only the delivery's outcome gives (modified, released) is not the link's error
                link.sendFailedUnclear = !isState(state, "modified") && !isState(state, "released");
            }
            r.add("remote_settled", JsonNull.INSTANCE);  // the JMS API does not say whether the peer settled
            r.add("locally_settled", JsonNull.INSTANCE); // nor whether qpid-jms settled it
            synchronized (progress) {
                if (progress.abandoned) {
                    JsonObject event = new JsonObject();
                    event.addProperty("event", "delivery-update");
                    event.addProperty("link", link.name);
                    event.addProperty("index", i);
                    event.add("remote_state", r.get("remote_state"));
                    event.add("remote_settled", JsonNull.INSTANCE);
                    event.add("api", r.get("api"));
                    write(event);
                    return; // the reply told the harness the rest were not sent
                }
                progress.reports.add(r);
            }
        }
    }

    /** Whether {@code state} (a report's remote_state) is a delivery state of {@code type}. */
    private static boolean isState(JsonElement state, String type) {
        return state.isJsonObject() && type.equals(state.getAsJsonObject().get("type").getAsString());
    }

    /** The delivery state a failed synchronous send's exception tells, or null where it tells none. */
    private static JsonElement stateFromSendException(Exception e) {
        if (causeOf(e, ProviderConnectionRemotelyClosedException.class) != null
                || causeOf(e, JmsConnectionRemotelyClosedException.class) != null) {
            // the broker closed the connection: its error is the connection's (the ExceptionListener's event),
            // and the send's message got no outcome
            return JsonNull.INSTANCE;
        }
        ProviderDeliveryModifiedException modified = causeOf(e, ProviderDeliveryModifiedException.class);
        if (modified != null) {
            JsonObject s = state("modified");
            s.addProperty("delivery_failed", modified.isDeliveryFailed());
            s.addProperty("undeliverable_here", modified.isUndeliverableHere());
            s.add("message_annotations", JsonNull.INSTANCE); // the exception does not carry them
            return s;
        }
        if (causeOf(e, ProviderDeliveryReleasedException.class) != null) {
            return state("released");
        }
        String message = e.getMessage();
        if (message != null) {
            Matcher m = CONDITION.matcher(message);
            if (m.matches()) {
                // AmqpFixedProducer: a rejected outcome's error (or, when it has none, the link's remote
                // error) becomes this exception's "description [condition = symbol]".
                JsonObject s = state("rejected");
                s.addProperty("condition", m.group(2));
                s.addProperty("description", m.group(1).equals(NO_DESCRIPTION) ? null : m.group(1));
                return s;
            }
            // "Unknown error from remote peer" is what qpid-jms says both for a rejected outcome with no error
            // and for a link or connection that went away without one: it tells no delivery state.
        }
        return JsonNull.INSTANCE;
    }

    /** The JMS API has no drain call: qpid-jms drains only inside a receive with a prefetch of 0, one credit. */
    private JsonObject drain(JsonObject cmd) throws Failure {
        link(cmd, false);
        throw new Failure(error("unsupported", "the JMS API has no drain call (qpid-jms drains only inside a"
                + " receive with a prefetch of 0, one credit at a time)"));
    }

    private JsonObject receive(JsonObject cmd) throws Failure {
        Link link = link(cmd, false);
        long timeout = timeout(cmd);
        int count = cmd.has("count") ? cmd.get("count").getAsInt() : 1;
        JsonObject outcome = cmd.has("outcome") && cmd.get("outcome").isJsonObject()
                ? cmd.getAsJsonObject("outcome") : state("accepted");
        boolean settle = !cmd.has("settle") || cmd.get("settle").getAsBoolean();
        int ackType = ackType(outcome);
        if (!settle) {
            throw new Failure(error("unsupported", "qpid-jms settles every disposition it sends"
                    + " (AmqpConsumer.handleDisposition: disposition then settle) and attaches rcv-settle-mode first"));
        }

        JsonArray deliveries = new JsonArray();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeout);
        for (int i = 0; i < count; i++) {
            long remaining = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            Message message = null;
            try {
                if (remaining > 0) {
                    message = receiveWithin(link.consumer, remaining, timeout);
                }
            } catch (JMSException e) {
                throw failure(e, "link");
            }
            if (message == null) {
                throw new Failure(error("timeout", i + " of " + count + " messages within " + timeout + " ms"));
            }
            JsonObject r = report(i);
            try {
                r.add("body", message instanceof TextMessage ? GSON.toJsonTree(((TextMessage) message).getText())
                        : JsonNull.INSTANCE);
                if (!(message instanceof TextMessage)) {
                    r.addProperty("body_type", message.getClass().getSimpleName());
                }
                r.add("tag", JsonNull.INSTANCE);                // the JMS API does not expose delivery tags
                r.add("settled_on_arrival", JsonNull.INSTANCE); // nor whether the transfer came settled
                // qpid-jms's JMSXDeliveryCount is the header's delivery-count + 1 (AmqpJmsMessageFacade)
                r.addProperty("delivery_count", message.getIntProperty("JMSXDeliveryCount") - 1);
                r.add("first_acquirer", JsonNull.INSTANCE);     // not exposed by the JMS API
                message.setIntProperty(ACK_TYPE, ackType);
                message.acknowledge();
                r.add("disposed", outcome);
                r.add("locally_settled", JsonNull.INSTANCE);    // acknowledge() does not report settlement
                r.add("remote_settled", JsonNull.INSTANCE);
                r.addProperty("api", "MessageConsumer.receive(); Message.acknowledge() with " + ACK_TYPE + "=" + ackType);
            } catch (JMSException e) {
                throw failure(e, "link");
            }
            deliveries.add(r);
        }
        JsonObject r = new JsonObject();
        r.add("deliveries", deliveries);
        return r;
    }

    /**
     * MessageConsumer.receive(remaining), answered hung when it has not returned {@link #HANG_GRACE_MS} past the
     * command's deadline: qpid-jms drains when the time-out passes and waits for the peer's answer to the drain
     * (its amqp.drainTimeout, 60 s), so a peer that never answers keeps the call far beyond the caller's time-out.
     */
    private Message receiveWithin(MessageConsumer consumer, long remaining, long timeout) throws Failure, JMSException {
        Future<Message> call = workers.submit(() -> consumer.receive(remaining));
        try {
            return call.get(remaining + HANG_GRACE_MS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            hung = "receive did not return within its " + timeout + " ms deadline and " + HANG_GRACE_MS + " ms more";
            log("hung: " + hung);
            throw new Failure(error("hung", "qpid-jms's " + hung));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Failure(error("client", "interrupted while waiting for MessageConsumer.receive()"));
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof JMSException) {
                throw (JMSException) cause;
            }
            throw new Failure(error("client", describe(cause)));
        }
    }

    /** The JMS_AMQP_ACK_TYPE giving exactly this outcome, or unsupported. */
    private static int ackType(JsonObject outcome) throws Failure {
        String type = str(outcome, "type");
        if (type == null) {
            throw new Failure(error("client", "outcome needs a type"));
        }
        switch (type) {
            case "accepted":
                return ACCEPTED;
            case "released":
                return RELEASED;
            case "rejected":
                if (str(outcome, "condition") != null || str(outcome, "description") != null) {
                    throw new Failure(error("unsupported", "qpid-jms's " + ACK_TYPE + "=2 (REJECTED) sends rejected"
                            + " with no error: the JMS API cannot reject with a chosen condition or description"));
                }
                return REJECTED;
            case "modified":
                boolean failed = bool(outcome, "delivery_failed");
                boolean undeliverable = bool(outcome, "undeliverable_here");
                JsonElement annotations = outcome.get("message_annotations");
                boolean hasAnnotations = annotations != null && !annotations.isJsonNull()
                        && !(annotations.isJsonObject() && annotations.getAsJsonObject().size() == 0);
                if (hasAnnotations) {
                    throw new Failure(error("unsupported", "qpid-jms's " + ACK_TYPE + "=4/5 send modified without"
                            + " message-annotations: the JMS API cannot give them"));
                }
                if (!failed) {
                    throw new Failure(error("unsupported", "qpid-jms's " + ACK_TYPE + "=4/5 send modified with"
                            + " delivery-failed true only: the JMS API cannot send delivery-failed false"));
                }
                return undeliverable ? MODIFIED_FAILED_UNDELIVERABLE : MODIFIED_FAILED;
            default:
                throw new Failure(error("client", "unknown outcome type: " + type));
        }
    }

    private JsonObject detach(JsonObject cmd) throws Failure {
        Link link = link(cmd, null);
        long timeout = timeout(cmd);
        boolean close = !cmd.has("close") || cmd.get("close").getAsBoolean();
        if (!close) {
            throw new Failure(error("unsupported", "qpid-jms's MessageProducer.close()/MessageConsumer.close() on a"
                    + " queue close the link (detach closed=true); only durable topic subscribers detach without closing"));
        }
        try {
            within(timeout, () -> {
                if (link.sender) {
                    link.producer.close();
                } else {
                    link.consumer.close();
                }
                return null;
            });
        } catch (Exception e) {
            throw failure(e, "link");
        } finally {
            links.remove(link.name);
        }
        return new JsonObject();
    }

    private JsonObject close(JsonObject cmd) throws Failure {
        requireConnection();
        long timeout = timeout(cmd);
        JmsConnection c = connection;
        long noticeDeadline = System.nanoTime()
                + TimeUnit.MILLISECONDS.toNanos(Math.min(LINK_CLOSE_NOTICE_MS, timeout));
        for (Link l : links.values()) {
            if (l.sendFailedUnclear) {
                try {
                    l.closeTold.await(Math.max(0, noticeDeadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        connection = null;
        links.clear();
        try {
            within(timeout, () -> {
                c.close();
                return null;
            });
        } catch (Exception e) {
            throw failure(e, "connection");
        }
        return new JsonObject();
    }

    private void shutdown() {
        if (connection != null) {
            JmsConnection c = connection;
            connection = null;
            try {
                within(DEFAULT_TIMEOUT_MS, () -> {
                    c.close();
                    return null;
                });
            } catch (Exception e) {
                log("close at end of input: " + describe(e));
            }
        }
        workers.shutdownNow();
    }

    // ----------------------------------------------------------------------------------------- events

    private void onConnectionException(JMSException e) {
        JsonObject event = new JsonObject();
        boolean remoteClose = causeOf(e, ProviderConnectionRemotelyClosedException.class) != null;
        event.addProperty("event", remoteClose ? "remote-close" : "error");
        event.addProperty("scope", "connection");
        addCondition(event, e.getMessage());
        event.addProperty("api", "ExceptionListener.onException: " + describe(e));
        write(event);
    }

    /** qpid-jms's JmsConnectionListener tells of sessions and links the peer closed. */
    private final class LinkClosures implements JmsConnectionListener {
        @Override public void onConnectionEstablished(URI remoteURI) { }
        @Override public void onConnectionFailure(Throwable error) { } // told by the ExceptionListener
        @Override public void onConnectionInterrupted(URI remoteURI) { }
        @Override public void onConnectionRestored(URI remoteURI) { }
        @Override public void onInboundMessage(JmsInboundMessageDispatch envelope) { }

        @Override
        public void onSessionClosed(Session session, Throwable cause) {
            String name = attaching;
            for (Link l : links.values()) {
                if (l.session == session) {
                    name = l.name;
                }
            }
            closed("session", name, cause, "JmsConnectionListener.onSessionClosed");
        }

        @Override
        public void onConsumerClosed(MessageConsumer consumer, Throwable cause) {
            closed("link", nameOf(consumer), cause, "JmsConnectionListener.onConsumerClosed");
        }

        @Override
        public void onProducerClosed(MessageProducer producer, Throwable cause) {
            closed("link", nameOf(producer), cause, "JmsConnectionListener.onProducerClosed");
        }

        private String nameOf(Object endpoint) {
            for (Link l : links.values()) {
                if (l.producer == endpoint || l.consumer == endpoint) {
                    return l.name;
                }
            }
            return attaching; // closed while its attach command was still running
        }

        private void closed(String scope, String link, Throwable cause, String api) {
            Link closing = link == null ? null : links.get(link);
            JsonObject event = new JsonObject();
            event.addProperty("event", "error");
            event.addProperty("scope", scope);
            event.addProperty("link", link);
            addCondition(event, cause == null ? null : cause.getMessage());
            event.addProperty("api", api + (cause == null ? "" : ": " + describe(cause)));
            write(event);
            if (closing != null) {
                closing.closeTold.countDown(); // after the event is written: close may go on
            }
        }
    }

    // ----------------------------------------------------------------------------------------- helpers

    private <T> T within(long timeoutMs, Callable<T> work) throws Exception {
        Future<T> future = workers.submit(work);
        try {
            return future.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new TimedOut(timeoutMs, future);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception) {
                throw (Exception) cause;
            }
            throw e;
        }
    }

    /**
     * The error reply for an exception the library threw: amqp where its message (or a cause's, as for
     * "The MessageConsumer was closed due to an unrecoverable error.") carries a peer's condition.
     */
    private static Failure failure(Throwable t, String scope) {
        if (t instanceof Failure) {
            return (Failure) t;
        }
        if (causeOf(t, ProviderConnectionRemotelyClosedException.class) != null) {
            scope = "connection"; // the peer closed the connection: whatever the command was about went with it
        }
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            Matcher m = c.getMessage() == null ? null : CONDITION.matcher(c.getMessage());
            if (m != null && m.matches()) {
                JsonObject e = new JsonObject();
                e.addProperty("kind", "amqp");
                e.addProperty("scope", scope);
                e.addProperty("condition", m.group(2));
                e.addProperty("description", m.group(1).equals(NO_DESCRIPTION) ? null : m.group(1));
                log("amqp error from " + scope + ": " + describe(t));
                return new Failure(e);
            }
        }
        return new Failure(error("client", describe(t)));
    }

    private static void addCondition(JsonObject event, String message) {
        Matcher m = message == null ? null : CONDITION.matcher(message);
        if (m != null && m.matches()) {
            event.addProperty("condition", m.group(2));
            event.addProperty("description", m.group(1).equals(NO_DESCRIPTION) ? null : m.group(1));
        } else {
            event.add("condition", JsonNull.INSTANCE);
            event.addProperty("description", message);
        }
    }

    private void requireConnection() throws Failure {
        if (connection == null) {
            throw new Failure(error("client", "not connected: connect first"));
        }
    }

    /** The named link; sender true/false requires that role, null either. */
    private Link link(JsonObject cmd, Boolean sender) throws Failure {
        requireConnection();
        String name = str(cmd, "link");
        Link link = links.get(name);
        if (link == null) {
            throw new Failure(error("client", "unknown link: " + name));
        }
        if (sender != null && link.sender != sender) {
            throw new Failure(error("client", "link " + name + " is a " + (link.sender ? "sender" : "receiver")));
        }
        return link;
    }

    private interface Closer {
        void close() throws Exception;
    }

    /** After a failed connect or attach: close what it made, once a call that timed out has returned. */
    private void closeWhenDone(Exception failed, Closer closer) {
        Future<?> call = failed instanceof TimedOut ? ((TimedOut) failed).call : null;
        workers.submit(() -> {
            try {
                if (call != null) {
                    call.get();
                }
            } catch (Exception e) {
                // it failed: whatever it made is still closed below
            }
            try {
                closer.close();
            } catch (Exception e) {
                log("closing after a failed command: " + describe(e));
            }
        });
    }

    private static <T extends Throwable> T causeOf(Throwable t, Class<T> type) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (type.isInstance(c)) {
                return type.cast(c);
            }
        }
        return null;
    }

    private static String describe(Throwable t) {
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    private static JsonObject error(String kind, String description) {
        JsonObject e = new JsonObject();
        e.addProperty("kind", kind);
        e.addProperty("description", description);
        return e;
    }

    private static JsonObject state(String type) {
        JsonObject s = new JsonObject();
        s.addProperty("type", type);
        return s;
    }

    private static JsonObject report(int index) {
        JsonObject r = new JsonObject();
        r.addProperty("index", index);
        r.add("tag", JsonNull.INSTANCE); // the JMS API does not expose delivery tags
        return r;
    }

    private static long timeout(JsonObject cmd) {
        return cmd.has("timeout_ms") && !cmd.get("timeout_ms").isJsonNull()
                ? Math.max(1, cmd.get("timeout_ms").getAsLong()) : DEFAULT_TIMEOUT_MS;
    }

    /** A URL's user-info part decoded: %XX escapes only ('+' is a plus there, not a space). */
    private static String percentDecode(String raw) {
        return URLDecoder.decode(raw.replace("+", "%2B"), StandardCharsets.UTF_8);
    }

    private static String str(JsonObject o, String key) {
        JsonElement e = o.get(key);
        return e == null || e.isJsonNull() ? null : e.getAsString();
    }

    private static boolean bool(JsonObject o, String key) {
        JsonElement e = o.get(key);
        return e != null && !e.isJsonNull() && e.getAsBoolean();
    }
}

// Client shim for Qpid Proton C++ (Debian's libqpid-proton-cpp12-dev, 0.37.0): speaks the JSON-lines
// contract of peers/shims/README.md on stdin/stdout. A shim never judges: it reports what the proton C++ API
// told it, naming the call or event in "api".
//
// Threads: proton::container::run() on its own thread calls the messaging_handler below; the main thread
// reads stdin and hands each command over with container::schedule() (thread safe), then waits for its reply.
// All proton objects are touched on the container thread only. stdout carries JSON lines only, written under
// a mutex; diagnostics (and proton's own logger, which writes to stderr) go to stderr.
//
// A crash (an abort, such as a failed assertion, or a fault) writes the crashing thread's native stack to
// stderr after a marker line, so that peers/shimrun/crash.py ("native") can tell proton's own crash in its
// loop (no shim frame between container_thread and the crash) from the shim's; the Makefile links with
// -rdynamic so the shim's frames carry their names. An exception that ends container::run() is proton's own
// (its loop threw with no shim frame on the way, as 0.37's adapter does decoding an aborted delivery) only when
// none ever left shim code the container ran: each callback and each piece of scheduled work starts with a
// ShimFrame, which notes an exception unwinding through it; the shim then writes crash.py's marker for it.

#include <proton/connection.hpp>
#include <proton/connection_options.hpp>
#include <proton/container.hpp>
#include <proton/delivery.hpp>
#include <proton/delivery_mode.hpp>
#include <proton/error_condition.hpp>
#include <proton/message.hpp>
#include <proton/messaging_handler.hpp>
#include <proton/receiver.hpp>
#include <proton/receiver_options.hpp>
#include <proton/sender.hpp>
#include <proton/sender_options.hpp>
#include <proton/session.hpp>
#include <proton/tracker.hpp>
#include <proton/transport.hpp>
#include <proton/types.hpp>
#include <proton/version.h>
#include <proton/work_queue.hpp>

#include <nlohmann/json.hpp>

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

using json = nlohmann::json;

namespace {

const char* const CLIENT = "proton-cpp";
const char* const LIBRARY = "libqpid-proton-cpp12-dev";

// Whether an exception ever left shim code the container ran (a ShimFrame saw it unwind): then one that ends
// container::run() may be the shim's, and is reported as the shim's exit, never as proton's own.
std::atomic<bool> shim_threw{false};

// The first statement of every messaging_handler callback and every piece of work the shim schedules.
struct ShimFrame {
    int uncaught = std::uncaught_exceptions();
    ~ShimFrame() { if (std::uncaught_exceptions() > uncaught) shim_threw = true; }
};

// ---- output: one JSON object a line, replies signal the waiting stdin thread --------------------------

std::mutex out_mu;
std::condition_variable replied_cv;
bool replied = false;

void write_line(const json& j) {
    std::lock_guard<std::mutex> l(out_mu);
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
}

void write_reply(const json& j, bool internal = false) {
    std::lock_guard<std::mutex> l(out_mu);
    if (internal) std::cerr << "proton-cpp shim: shutdown: " << j.dump() << std::endl;  // not a command's reply
    else std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
    replied = true;
    replied_cv.notify_all();
}

std::mutex run_mu;                  // container::run() has returned
std::condition_variable run_cv;
bool run_done = false;

void diag(const std::string& s) { std::cerr << "proton-cpp shim: " << s << std::endl; }

// ---- a crash: the crashing thread's stack to stderr, then the signal's default action --------------------

struct CrashSignal { int number; const char* name; };
const CrashSignal CRASH_SIGNALS[] = {{SIGABRT, "SIGABRT"}, {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}};
const char CRASH_MARKER[] = ": native stack of the crashing thread (innermost first):\n";  // crash.py's

void put(const char* s) { if (write(STDERR_FILENO, s, std::strlen(s)) < 0) return; }

// Async-signal-safe calls only (write, backtrace_symbols_fd: no malloc): "proton-cpp shim: SIGABRT" and the
// marker, then a line a frame, the handler's own left out, so the innermost is the one that raised or faulted.
void on_crash(int sig) {
    void* frames[128];
    int n = backtrace(frames, 128);
    put("proton-cpp shim: ");
    for (const CrashSignal& s : CRASH_SIGNALS) if (s.number == sig) put(s.name);
    put(CRASH_MARKER);
    if (n > 1) backtrace_symbols_fd(frames + 1, n - 1, STDERR_FILENO);
    std::signal(sig, SIG_DFL);
    std::raise(sig);  // delivered once the handler returns: the exit status stays the signal's
}

void report_crashes() {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now: its first use allocates, which a handler must not
    for (const CrashSignal& s : CRASH_SIGNALS) std::signal(s.number, on_crash);
}

json err(const std::string& kind, const std::string& description) {
    return {{"kind", kind}, {"description", description}};
}

json amqp_err(const std::string& scope, const proton::error_condition& c) {
    json e = {{"kind", "amqp"}, {"scope", scope}, {"condition", nullptr}, {"description", nullptr}};
    if (!c.empty()) {
        e["condition"] = c.name();
        e["description"] = c.description().empty() ? json(nullptr) : json(c.description());
    }
    return e;
}

std::string hex(const proton::binary& b) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (uint8_t c : b) { s += digits[c >> 4]; s += digits[c & 15]; }
    return s;
}

// transfer::state() is pn_delivery_remote_state(): the type only. The C++ API gives no error condition of a
// rejected state and no field of a modified one, so those keys are left out (not reported as null).
json state_json(enum proton::transfer::state s) {
    switch (s) {
    case proton::transfer::NONE: return nullptr;
    case proton::transfer::RECEIVED: return {{"type", "received"}};
    case proton::transfer::ACCEPTED: return {{"type", "accepted"}};
    case proton::transfer::REJECTED: return {{"type", "rejected"}};
    case proton::transfer::RELEASED: return {{"type", "released"}};
    case proton::transfer::MODIFIED: return {{"type", "modified"}};
    }
    return {{"type", proton::to_string(s)}};
}

json body_json(const proton::value& v) {
    switch (v.type()) {
    case proton::NULL_TYPE: return nullptr;
    case proton::STRING: return proton::get<std::string>(v);
    case proton::SYMBOL: return std::string(proton::get<proton::symbol>(v));
    case proton::BINARY: {
        proton::binary b = proton::get<proton::binary>(v);
        return std::string(b.begin(), b.end());
    }
    default: return proton::to_string(v);
    }
}

std::string exception_text(const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
}

// ---- the handler: every member is used on the container thread only ------------------------------------

struct Arrival {          // a message received and not yet handed to a receive command
    proton::delivery d;
    json body;
    std::string tag;
    bool settled_on_arrival;
    uint32_t delivery_count;
    bool first_acquirer;
};

struct Sent {             // one message of a send command
    proton::tracker t;
    json send_id;
    int index;
    std::string tag;
    json remote_state;
    bool locally_settled;
    bool done;            // pre-settled, or the receiver settled it
    std::string api;
};

struct Link {
    std::string name;
    bool is_sender = false;
    std::string snd_mode;
    proton::sender s;
    proton::receiver r;
    bool gone = false;                  // the peer detached or closed it
    proton::error_condition error;      // the condition it came with
    std::deque<Arrival> arrivals;
    std::vector<Sent> sent;
    proton::link link() const { return is_sender ? proton::link(s) : proton::link(r); }
};

struct Pending {                        // the command awaiting its reply (the harness sends one at a time)
    bool active = false;
    json id;
    std::string op;
    std::string link;
    uint64_t gen = 0;
    int timeout_ms = 0;
    std::deque<std::pair<int, json>> to_send;   // send: messages waiting for credit
    std::vector<size_t> sent;                   // send: indexes into Link::sent
    size_t total = 0;                           // send: messages; receive: count
    json outcome;                               // receive
    json reports = json::array();               // receive
};

class Shim : public proton::messaging_handler {
  public:
    explicit Shim() = default;
    void bind(proton::container& c) { cont_ = &c; }

    // Runs on the container thread (scheduled by the stdin thread). What touches the connection runs in the
    // connection's own context, through its work_queue (changes made elsewhere are not written out until
    // the connection wakes).
    void command(const json& c) {
        ShimFrame frame;
        p_ = Pending();
        p_.active = true;
        p_.id = c.value("id", json(nullptr));
        p_.op = c.value("op", "");
        p_.gen = ++gen_;
        p_.timeout_ms = c.contains("timeout_ms") && c["timeout_ms"].is_number() ? c["timeout_ms"].get<int>() : 10000;
        uint64_t gen = p_.gen;
        in_connection([this, c, gen]() { ShimFrame frame; execute(c, gen); });
    }

  private:
    void in_connection(proton::work f) {
        if (conn_ && conn_.work_queue().add(f)) return;
        f();
    }

    void execute(const json& c, uint64_t gen) {
        try {
            if (p_.op == "connect") do_connect(c);
            else if (p_.op == "attach") do_attach(c);
            else if (p_.op == "send") do_send(c);
            else if (p_.op == "receive") do_receive(c);
            else if (p_.op == "drain") do_drain(c);
            else if (p_.op == "detach") do_detach(c);
            else if (p_.op == "close") do_close();
            else if (p_.op == "_shutdown") do_shutdown();
            else fail(err("client", "unknown op '" + p_.op + "'"));
        } catch (const std::exception& e) {
            if (p_.active && p_.gen == gen) fail(err("client", exception_text(e)));
            else diag("after the reply: " + exception_text(e));
        }
        if (p_.active && p_.gen == gen) {
            cont_->schedule(proton::duration(p_.timeout_ms), [this, gen]() {
                ShimFrame frame;
                in_connection([this, gen]() { ShimFrame frame; if (p_.active && p_.gen == gen) timed_out(); });
            });
        }
    }

  public:
    // ---- connection ----

    void on_connection_open(proton::connection& c) override {
        ShimFrame frame;
        if (c != conn_) return;
        if (pending("connect")) {
            ok({{"remote_container", c.container_id()}});
        }
    }

    void on_connection_error(proton::connection& c) override {
        ShimFrame frame;
        if (c != conn_) return;
        conn_error_ = c.error();
        if (p_.active && p_.op != "close" && p_.op != "_shutdown") {
            fail(amqp_err("connection", conn_error_));
        } else if (!p_.active) {
            event_error("connection", "", conn_error_, "on_connection_error");
        }
    }

    void on_connection_close(proton::connection& c) override {
        ShimFrame frame;
        if (c != conn_) return;
        if (!conn_error_.empty()) return;       // on_connection_error told it
        if (p_.active && p_.op != "close" && p_.op != "_shutdown") {
            fail(amqp_err("connection", proton::error_condition()));
        } else if (!p_.active) {
            write_line({{"event", "remote-close"}, {"scope", "connection"}, {"condition", nullptr},
                        {"description", nullptr}, {"api", "on_connection_close"}});
        }
    }

    void on_transport_error(proton::transport& t) override {
        ShimFrame frame;
        if (t.connection() != conn_) return;
        proton::error_condition e = t.error();
        std::string what = "on_transport_error: " + e.what();
        if (p_.active && p_.op != "close" && p_.op != "_shutdown") {
            fail(err("client", what));
        } else if (!p_.active && conn_error_.empty()) {
            event_error("connection", "", e, "on_transport_error");
        } else {
            transport_error_ = e;               // a close under way: its reply says so
            diag(what);
        }
    }

    void on_transport_close(proton::transport& t) override {
        ShimFrame frame;
        if (t.connection() != conn_) return;
        conn_ = proton::connection();
        links_.clear();
        if (pending("close")) {
            if (!conn_error_.empty()) fail(amqp_err("connection", conn_error_));
            else if (!transport_error_.empty()) fail(err("client", "on_transport_error: " + transport_error_.what()));
            else ok({});
        } else if (pending("_shutdown")) {
            ok({});
        } else if (p_.active) {
            fail(err("client", "on_transport_close: the connection's transport closed"));
        }
        conn_error_ = transport_error_ = proton::error_condition();
    }

    // ---- sessions (the default session of the connection) ----

    void on_session_error(proton::session& s) override {
        ShimFrame frame;
        if (s.connection() != conn_) return;
        if (p_.active && p_.op != "close" && p_.op != "_shutdown") fail(amqp_err("session", s.error()));
        else if (!p_.active) event_error("session", "", s.error(), "on_session_error");
    }

    void on_session_close(proton::session& s) override {
        ShimFrame frame;
        if (s.connection() != conn_ || !s.error().empty()) return;
        if (p_.active && p_.op != "close" && p_.op != "_shutdown") {
            fail(amqp_err("session", proton::error_condition()));
        } else if (!p_.active) {
            write_line({{"event", "remote-close"}, {"scope", "session"}, {"condition", nullptr},
                        {"description", nullptr}, {"api", "on_session_close"}});
        }
    }

    // ---- links ----

    void on_sender_open(proton::sender& s) override { ShimFrame frame; link_opened(find(s), "on_sender_open"); }
    void on_receiver_open(proton::receiver& r) override { ShimFrame frame; link_opened(find(r), "on_receiver_open"); }
    void on_sender_error(proton::sender& s) override { ShimFrame frame; link_error(find(s), "on_sender_error"); }
    void on_receiver_error(proton::receiver& r) override { ShimFrame frame; link_error(find(r), "on_receiver_error"); }
    void on_sender_close(proton::sender& s) override { ShimFrame frame; link_ended(find(s), true, "on_sender_close"); }
    void on_receiver_close(proton::receiver& r) override { ShimFrame frame; link_ended(find(r), true, "on_receiver_close"); }
    void on_sender_detach(proton::sender& s) override { ShimFrame frame; link_ended(find(s), false, "on_sender_detach"); }
    void on_receiver_detach(proton::receiver& r) override { ShimFrame frame; link_ended(find(r), false, "on_receiver_detach"); }

    void on_sendable(proton::sender& s) override {
        ShimFrame frame;
        Link* L = find(s);
        if (L && pending("send") && p_.link == L->name) pump(*L);
    }

    // The broker's flow set drain (AMQP 1.0 2.6.7): told, and with no message waiting for credit answered as the
    // API asks an application with nothing to send (sender::return_credit(): proton moves the delivery-count
    // through the credit left and writes the flow that says so).
    void on_sender_drain_start(proton::sender& s) override {
        ShimFrame frame;
        Link* L = find(s);
        if (!L) return;
        write_line({{"event", "drain-requested"}, {"link", L->name}, {"api", "on_sender_drain_start"}});
        if (!(pending("send") && p_.link == L->name && !p_.to_send.empty())) s.return_credit();
    }

    // ---- deliveries ----

    void on_tracker_accept(proton::tracker& t) override { ShimFrame frame; tracker_state(t, "on_tracker_accept"); }
    void on_tracker_reject(proton::tracker& t) override { ShimFrame frame; tracker_state(t, "on_tracker_reject"); }
    void on_tracker_release(proton::tracker& t) override { ShimFrame frame; tracker_state(t, "on_tracker_release"); }

    void on_tracker_settle(proton::tracker& t) override {
        ShimFrame frame;
        Link* L = find(t.sender());
        Sent* rec = L ? find_sent(*L, t) : nullptr;
        if (!rec) { t.settle(); return; }
        rec->remote_state = state_json(t.state());
        // auto_settle(false) on our senders: settle here, as the library's default auto_settle would.
        t.settle();
        rec->locally_settled = true;
        rec->done = true;
        rec->api += rec->api.empty() ? "on_tracker_settle; tracker::settle()" : " + on_tracker_settle; tracker::settle()";
        delivery_changed(*L, *rec);
    }

    // The drain asked by do_drain ended: proton's adapter calls this once the link's credit is 0 while it drains
    // (the broker's flow, or a transfer that used the last credit), after it cleared the link's drain flag.
    void on_receiver_drain_finish(proton::receiver& r) override {
        ShimFrame frame;
        Link* L = find(r);
        if (L && pending("drain") && p_.link == L->name) ok({{"api", "on_receiver_drain_finish"}, {"credit", r.credit()}});
        else diag("on_receiver_drain_finish with no drain waiting for it" + std::string(L ? " (link '" + L->name + "')" : ""));
    }

    // With no receive waiting (a drain under way, or none) the message stays with the library: not accepted, not
    // settled; a later receive of its link takes it first.
    void on_message(proton::delivery& d, proton::message& m) override {
        ShimFrame frame;
        Link* L = find(d.receiver());
        if (!L) { diag("a message on an unknown link; left unsettled"); return; }
        Arrival a{d, body_json(m.body()), hex(d.tag()), d.settled(), m.delivery_count(), m.first_acquirer()};
        if (pending("receive") && p_.link == L->name) {
            dispose(a);
            receive_check();
        } else {
            L->arrivals.push_back(a);
        }
    }

    void on_error(const proton::error_condition& c) override {
        ShimFrame frame;
        diag("on_error: " + c.what());
    }

  private:
    proton::container* cont_ = nullptr;
    proton::connection conn_;                 // the current connection, empty between cycles
    proton::error_condition conn_error_;      // what the peer closed it with
    proton::error_condition transport_error_; // what the transport failed with while we closed
    bool cycle_ = false;                      // between a connect and its close
    std::map<std::string, Link> links_;
    Pending p_;
    uint64_t gen_ = 0;

    bool pending(const char* op) const { return p_.active && p_.op == op; }

    void ok(json body) {
        body["id"] = p_.id;
        body["ok"] = true;
        p_.active = false;
        write_reply(body, p_.op == "_shutdown");
    }

    void fail(json e, json extra = json::object()) {
        extra["id"] = p_.id;
        extra["ok"] = false;
        extra["error"] = e;
        p_.active = false;
        write_reply(extra, p_.op == "_shutdown");
    }

    void event_error(const std::string& scope, const std::string& link, const proton::error_condition& c,
                     const std::string& api) {
        json e = {{"event", "error"}, {"scope", scope}, {"condition", nullptr}, {"description", nullptr}, {"api", api}};
        if (!link.empty()) e["link"] = link;
        if (!c.empty()) {
            e["condition"] = c.name();
            if (!c.description().empty()) e["description"] = c.description();
        }
        write_line(e);
    }

    bool connected() const { return bool(conn_); }

    Link* find(const std::string& name) {
        auto it = links_.find(name);
        return it == links_.end() ? nullptr : &it->second;
    }
    Link* find(const proton::sender& s) {
        for (auto& kv : links_) if (kv.second.is_sender && kv.second.s == s) return &kv.second;
        return nullptr;
    }
    Link* find(const proton::receiver& r) {
        for (auto& kv : links_) if (!kv.second.is_sender && kv.second.r == r) return &kv.second;
        return nullptr;
    }
    Sent* find_sent(Link& L, const proton::tracker& t) {
        for (auto& rec : L.sent) if (rec.t == t) return &rec;
        return nullptr;
    }

    Link* command_link(const json& c, bool sender) {
        if (!cycle_ || !connected()) { fail(err("client", "not connected")); return nullptr; }
        std::string name = c.value("link", "");
        Link* L = find(name);
        if (!L) { fail(err("client", "unknown link '" + name + "'")); return nullptr; }
        if (L->is_sender != sender) {
            fail(err("client", "link '" + name + "' is a " + (L->is_sender ? "sender" : "receiver")));
            return nullptr;
        }
        p_.link = name;
        return L;
    }

    // ---- commands ----

    void do_connect(const json& c) {
        if (cycle_ && connected()) { fail(err("client", "already connected: close first")); return; }
        std::string url = c.value("url", "");
        proton::connection_options o;
        if (c.contains("container_id") && c["container_id"].is_string()) o.container_id(c["container_id"].get<std::string>());
        if (c.contains("hostname") && c["hostname"].is_string()) o.virtual_host(c["hostname"].get<std::string>());
        // proton offers SASL PLAIN over an unencrypted socket only when told it may (user:password@ in url).
        size_t scheme = url.find("://");
        std::string authority = url.substr(scheme == std::string::npos ? 0 : scheme + 3);
        authority = authority.substr(0, authority.find('/'));
        if (authority.find('@') != std::string::npos) o.sasl_allow_insecure_mechs(true);
        links_.clear();
        conn_error_ = transport_error_ = proton::error_condition();
        conn_ = cont_->connect(url, o);
        cycle_ = true;
    }

    void do_close() {
        if (!cycle_) { fail(err("client", "not connected")); return; }
        cycle_ = false;
        if (!connected()) { ok({}); return; }   // the transport is already closed
        conn_.close();
    }

    void do_shutdown() {   // standard input ended: close the connection, if any, then stop
        cycle_ = false;
        if (!connected()) { ok({}); return; }
        conn_.close();
    }

    void do_attach(const json& c) {
        if (!cycle_ || !connected()) { fail(err("client", "not connected")); return; }
        std::string name = c.value("link", "");
        std::string role = c.value("role", "");
        std::string address = c.value("address", "");
        std::string snd = c.value("snd_settle_mode", "unsettled");
        std::string rcv = c.value("rcv_settle_mode", "first");
        if (role != "sender" && role != "receiver") { fail(err("client", "role must be sender or receiver")); return; }
        if (Link* old = find(name)) {
            if (!old->gone) { fail(err("client", "link '" + name + "' exists")); return; }
            links_.erase(name);
        }
        if (rcv != "first") {
            fail(err("unsupported", "rcv_settle_mode '" + rcv + "': proton C++ 0.37 sets settle modes only through "
                     "sender_options/receiver_options::delivery_mode (AT_MOST_ONCE: snd settled; AT_LEAST_ONCE: "
                     "snd unsettled, rcv first; NONE: the defaults, snd mixed, rcv first); no C++ call asks for "
                     "rcv-settle-mode second"));
            return;
        }
        proton::delivery_mode mode;
        if (snd == "unsettled") mode = proton::delivery_mode::AT_LEAST_ONCE;
        else if (snd == "settled") mode = proton::delivery_mode::AT_MOST_ONCE;
        else if (snd == "mixed") mode = proton::delivery_mode::NONE;
        else { fail(err("client", "snd_settle_mode must be unsettled, settled or mixed")); return; }

        Link L;
        L.name = name;
        L.is_sender = role == "sender";
        L.snd_mode = snd;
        p_.link = name;
        if (L.is_sender) {
            proton::sender_options o;
            o.delivery_mode(mode).auto_settle(false);
            L.s = conn_.open_sender(address, o);
        } else {
            proton::receiver_options o;
            // credit_window(0): no prefetch; receive grants the credit it needs (receiver::add_credit).
            o.delivery_mode(mode).auto_accept(false).credit_window(0);
            L.r = conn_.open_receiver(address, o);
        }
        links_[name] = L;
    }

    void do_send(const json& c) {
        Link* L = command_link(c, true);
        if (!L) return;
        if (L->gone) { fail(amqp_err("link", L->error)); return; }
        if (!c.contains("messages") || !c["messages"].is_array()) { fail(err("client", "messages must be a list")); return; }
        int i = 0;
        for (const json& m : c["messages"]) {
            if (!m.is_object() || !m.contains("body") || !m["body"].is_string()) {
                fail(err("client", "each message needs a string body"));
                return;
            }
            if (L->snd_mode == "settled" && !m.value("settled", false)) {
                fail(err("unsupported", "an unsettled message on a link attached with snd-settle-mode settled: "
                         "sender::send() settles every delivery of an AT_MOST_ONCE link at once"));
                return;
            }
            p_.to_send.emplace_back(i++, m);
        }
        p_.total = p_.to_send.size();
        pump(*L);
    }

    void pump(Link& L) {
        while (!p_.to_send.empty() && L.s.credit() > 0) {
            auto item = p_.to_send.front();
            p_.to_send.pop_front();
            proton::message msg;
            msg.body(item.second["body"].get<std::string>());
            proton::tracker t = L.s.send(msg);
            Sent rec{t, p_.id, item.first, hex(t.tag()), nullptr, false, false, ""};
            if (L.snd_mode == "settled") {                // sender::send() settled it (AT_MOST_ONCE)
                rec.locally_settled = rec.done = true;
                rec.api = "sender::send() (settled by the library: AT_MOST_ONCE link)";
            } else if (item.second.value("settled", false)) {
                t.settle();                                 // before the transfer is written: it goes settled
                rec.locally_settled = rec.done = true;
                rec.api = "sender::send(); tracker::settle()";
            } else {
                rec.api = "sender::send()";
            }
            L.sent.push_back(rec);
            p_.sent.push_back(L.sent.size() - 1);
        }
        send_check(L);
    }

    json sent_report(const Sent& rec) {
        return {{"index", rec.index}, {"tag", rec.tag}, {"remote_state", rec.remote_state},
                {"remote_settled", rec.t.settled()}, {"locally_settled", rec.locally_settled}, {"api", rec.api}};
    }

    void send_check(Link& L) {
        if (!pending("send") || p_.link != L.name || !p_.to_send.empty()) return;
        json reports = json::array();
        for (size_t k : p_.sent) {
            if (!L.sent[k].done) return;
            reports.push_back(sent_report(L.sent[k]));
        }
        ok({{"deliveries", reports}});
    }

    void tracker_state(proton::tracker& t, const char* api) {
        Link* L = find(t.sender());
        Sent* rec = L ? find_sent(*L, t) : nullptr;
        if (!rec) return;
        rec->remote_state = state_json(t.state());
        rec->api = std::string(api) + "; tracker::state()";
        if (!t.settled()) delivery_changed(*L, *rec);   // else on_tracker_settle follows at once
    }

    void delivery_changed(Link& L, Sent& rec) {
        bool in_pending = pending("send") && p_.link == L.name && rec.send_id == p_.id;
        if (in_pending) { send_check(L); return; }
        write_line({{"event", "delivery-update"}, {"link", L.name}, {"send_id", rec.send_id}, {"index", rec.index},
                    {"tag", rec.tag}, {"remote_state", rec.remote_state}, {"remote_settled", rec.t.settled()},
                    {"locally_settled", rec.locally_settled}, {"api", rec.api}});
    }

    // The outcome as proton C++ 0.37 can give it, or an "unsupported" reason. delivery::accept(), reject(),
    // release() and modify() each call pn_delivery_update() and then pn_delivery_settle(): no condition, no
    // modified field, no disposition without settling.
    std::string outcome_check(const json& o, bool settle, json& given) {
        if (!o.is_object() || !o.contains("type") || !o["type"].is_string()) return "!outcome must be an object with a type";
        std::string type = o["type"];
        if (!settle)
            return "settle false: delivery::accept()/reject()/release()/modify() always settle the delivery "
                   "(pn_delivery_settle); the C++ API has no disposition that leaves it unsettled";
        if (type == "accepted" || type == "released") { given = {{"type", type}}; return ""; }
        if (type == "rejected") {
            bool plain = o.value("condition", json(nullptr)).is_null() && o.value("description", json(nullptr)).is_null();
            if (!plain) return "rejected with a condition: delivery::reject() takes no error condition (it sends rejected with no error)";
            given = {{"type", "rejected"}, {"condition", nullptr}, {"description", nullptr}};
            return "";
        }
        if (type == "modified") {
            json ann = o.value("message_annotations", json(nullptr));
            bool plain = o.value("delivery_failed", false) == false && o.value("undeliverable_here", false) == false &&
                         ann.is_null();
            if (!plain)
                return "modified with delivery_failed/undeliverable_here true or message_annotations: "
                       "delivery::modify() takes no argument and sends modified with delivery-failed false, "
                       "undeliverable-here false, no annotations";
            given = {{"type", "modified"}, {"delivery_failed", false}, {"undeliverable_here", false},
                     {"message_annotations", nullptr}};
            return "";
        }
        return "!unknown outcome type '" + type + "'";
    }

    void do_receive(const json& c) {
        Link* L = command_link(c, false);
        if (!L) return;
        json given;
        std::string why = outcome_check(c.value("outcome", json(nullptr)), c.value("settle", true), given);
        if (!why.empty()) {
            if (why[0] == '!') fail(err("client", why.substr(1)));
            else fail(err("unsupported", why));
            return;
        }
        if (L->gone) { fail(amqp_err("link", L->error)); return; }
        int count = c.value("count", 1);
        p_.total = count < 0 ? 0 : size_t(count);
        p_.outcome = given;
        while (!L->arrivals.empty() && p_.reports.size() < p_.total) {
            Arrival a = L->arrivals.front();
            L->arrivals.pop_front();
            dispose(a);
        }
        int need = int(p_.total - p_.reports.size()) - L->r.credit();
        if (need > 0) L->r.add_credit(uint32_t(need));
        receive_check();
    }

    void dispose(Arrival& a) {
        std::string type = p_.outcome["type"];
        if (type == "accepted") a.d.accept();
        else if (type == "rejected") a.d.reject();
        else if (type == "released") a.d.release();
        else a.d.modify();
        p_.reports.push_back({{"index", p_.reports.size()}, {"body", a.body}, {"tag", a.tag},
                              {"settled_on_arrival", a.settled_on_arrival}, {"delivery_count", a.delivery_count},
                              {"first_acquirer", a.first_acquirer}, {"disposed", p_.outcome},
                              {"locally_settled", true}, {"remote_settled", a.d.settled()},
                              {"api", "on_message; delivery::" + std::string(type == "accepted" ? "accept" :
                                       type == "rejected" ? "reject" : type == "released" ? "release" : "modify") + "()"}});
    }

    void receive_check() {
        if (pending("receive") && p_.reports.size() >= p_.total) ok({{"deliveries", p_.reports}});
    }

    // receiver::add_credit(credit), then receiver::drain(): one callback, so proton writes one flow with the credit
    // and drain set. Answered in on_receiver_drain_finish; drain() throws proton::error while a drain is under way.
    void do_drain(const json& c) {
        Link* L = command_link(c, false);
        if (!L) return;
        json credit = c.value("credit", json(nullptr));
        if (!credit.is_number_integer() || credit.get<int64_t>() < 1 || credit.get<int64_t>() > UINT32_MAX) {
            fail(err("client", "credit must be an integer of at least 1"));
            return;
        }
        if (L->gone) { fail(amqp_err("link", L->error)); return; }
        L->r.add_credit(uint32_t(credit.get<int64_t>()));
        L->r.drain();
    }

    void do_detach(const json& c) {
        if (!cycle_ || !connected()) { fail(err("client", "not connected")); return; }
        std::string name = c.value("link", "");
        Link* L = find(name);
        if (!L) { fail(err("client", "unknown link '" + name + "'")); return; }
        p_.link = name;
        if (L->gone) {      // the peer ended it first; proton already answered with its own detach/close
            links_.erase(name);
            ok({{"api", "the peer had ended the link"}});
            return;
        }
        if (c.value("close", true)) L->link().close();
        else L->link().detach();
    }

    // Links are opened on the connection's default session (connection::open_sender/open_receiver), even once
    // the peer has ended it; the library then reports nothing for them. Timeouts say so.
    std::string session_note() {
        if (connected() && !conn_.default_session().active()) return " (the connection's default session has ended)";
        return "";
    }

    void timed_out() {
        std::string t = std::to_string(p_.timeout_ms) + " ms";
        if (p_.op == "connect") {
            fail(err("timeout", "no on_connection_open within " + t));
            if (connected()) conn_.close();
            conn_ = proton::connection();       // later events of that connection are ignored
            cycle_ = false;
            links_.clear();
        } else if (p_.op == "close" || p_.op == "_shutdown") {
            fail(err("timeout", "no on_transport_close within " + t));
            conn_ = proton::connection();
            links_.clear();
        } else if (p_.op == "send") {
            Link* L = find(p_.link);
            json reports = json::array();
            size_t done = 0;
            if (L) for (size_t k : p_.sent) { reports.push_back(sent_report(L->sent[k])); done += L->sent[k].done; }
            std::string d = std::to_string(done) + " of " + std::to_string(p_.total) + " deliveries settled within " + t;
            if (!p_.to_send.empty()) d += " (" + std::to_string(p_.to_send.size()) + " not sent: no credit)";
            d += session_note();
            p_.to_send.clear();
            fail(err("timeout", d), {{"deliveries", reports}});
        } else if (p_.op == "receive") {
            std::string d = std::to_string(p_.reports.size()) + " of " + std::to_string(p_.total) + " messages within " + t + session_note();
            fail(err("timeout", d), {{"deliveries", p_.reports}});
        } else if (p_.op == "drain") {
            Link* L = find(p_.link);
            std::string credit = L ? std::to_string(L->r.credit()) : "unknown";
            fail(err("timeout", "no on_receiver_drain_finish within " + t + " (receiver::credit() " + credit + ")" + session_note()));
        } else if (p_.op == "attach") {
            fail(err("timeout", "no on_sender_open/on_receiver_open within " + t + session_note()));
        } else if (p_.op == "detach") {
            fail(err("timeout", "no on_sender/receiver_close or _detach within " + t + session_note() + "; the link is forgotten"));
            links_.erase(p_.link);
        } else {
            fail(err("timeout", "within " + t));
        }
    }

    void link_opened(Link* L, const char* api) {
        if (!L) return;
        if (pending("attach") && p_.link == L->name) {
            if (!L->link().error().empty()) return;     // the peer's detach came with it: the close handler answers
            ok({{"remote_snd_settle_mode", nullptr}, {"remote_rcv_settle_mode", nullptr}, {"api", api}});
        }
    }

    void link_error(Link* L, const char* api) {
        if (!L) return;
        L->error = L->link().error();
        if (p_.active && p_.link == L->name && p_.op != "detach") fail(amqp_err("link", L->error));
        else if (!p_.active || p_.link != L->name) event_error("link", L->name, L->error, api);
    }

    void link_ended(Link* L, bool closed, const char* api) {
        if (!L) return;
        L->gone = true;
        bool has_error = !L->error.empty();
        if (pending("detach") && p_.link == L->name) {
            std::string name = L->name;
            if (has_error) fail(amqp_err("link", L->error));
            else ok({{"api", api}, {"closed", closed}});
            links_.erase(name);
            return;
        }
        if (has_error) return;                           // link_error told it
        if (p_.active && p_.link == L->name) {
            fail(amqp_err("link", proton::error_condition()), {{"api", api}});
        } else {
            write_line({{"event", "remote-close"}, {"scope", "link"}, {"link", L->name}, {"closed", closed},
                        {"condition", nullptr}, {"description", nullptr}, {"api", api}});
        }
    }
};

}  // namespace

// The container's thread: it only runs proton's loop. Outside the anonymous namespace and never inlined, so
// that a crash's stack names it (crash.py's loop_entries): a frame of proton's below it is proton's own loop.
[[gnu::noinline]] void container_thread(proton::container& container) {
    try {
        container.run();
    } catch (const std::exception& e) {
        if (!shim_threw) {  // proton's own loop threw: crash.py's marker, then what it threw (shimrun/crash.py)
            diag("exception: thrown by the library's own loop, no shim frame on the way: " +
                 exception_text(e));
        }
        diag("container.run() ended: " + exception_text(e));
        std::_Exit(3);
    }
    std::lock_guard<std::mutex> l(run_mu);
    run_done = true;
    run_cv.notify_all();
}

int main() {
    std::ios::sync_with_stdio(true);
    report_crashes();
    Shim shim;
    proton::container container(shim);
    shim.bind(container);
    container.auto_stop(false);
    std::thread runner(container_thread, std::ref(container));

    // Hand one command to the container thread and wait for its reply.
    auto submit = [&](const json& cmd, bool bounded) {
        {
            std::lock_guard<std::mutex> l(out_mu);
            replied = false;
        }
        container.schedule(proton::duration(0), [&shim, cmd]() { shim.command(cmd); });
        std::unique_lock<std::mutex> l(out_mu);
        if (bounded) replied_cv.wait_for(l, std::chrono::seconds(15), [] { return replied; });
        else replied_cv.wait(l, [] { return replied; });
    };

    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json cmd;
        try {
            cmd = json::parse(line);
        } catch (const std::exception& e) {
            diag("not JSON: " + line);
            continue;
        }
        if (!cmd.is_object()) { diag("not a JSON object: " + line); continue; }
        json id = cmd.value("id", json(nullptr));
        std::string op = cmd.value("op", "");
        if (op == "hello") {
            std::string version = std::to_string(PN_VERSION_MAJOR) + "." + std::to_string(PN_VERSION_MINOR) + "." +
                                  std::to_string(PN_VERSION_POINT);
            write_line({{"id", id}, {"ok", true}, {"client", CLIENT}, {"library", LIBRARY}, {"version", version},
                        {"language", "c++"}, {"api", "PN_VERSION_* of <proton/version.h> (the library has no run-time version call)"}});
            continue;
        }
        submit(cmd, false);
    }

    // Standard input ended: close the connection, if any (its reply goes to stderr), then stop.
    submit(json{{"id", nullptr}, {"op", "_shutdown"}, {"timeout_ms", 5000}}, true);
    // container::run() returns only once scheduled work is due, and a command's timeout stays scheduled
    // after its reply: wait briefly, then leave without the container's destructor.
    container.stop();
    {
        std::unique_lock<std::mutex> l(run_mu);
        run_cv.wait_for(l, std::chrono::milliseconds(500), [] { return run_done; });
        if (!run_done) {
            std::cout.flush();
            std::_Exit(0);
        }
    }
    runner.join();
    return 0;
}

"""The python-proton shim's reactor side: one ``MessagingHandler`` that runs the harness's commands.

Commands arrive as application events (``on_shim_command``) from the standard-input thread through an
``EventInjector``; everything here runs on the container's thread, which alone writes standard output.
The handler is built with ``prefetch=0`` (credit only as ``receive`` asks), ``auto_accept=False`` (every
outcome is the command's) and ``auto_settle=False`` (the shim calls ``Delivery.settle()`` itself where
``auto_settle`` would, and says so in the report's ``api``). It overrides ``MessagingHandler``'s error
callbacks, which would close the connection, and reads the peer's detach, end and close from proton's own
``*_remote_*`` events, so that every one is reported exactly once: as the reply of the command waiting for
it, else as an event.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from proton import Condition, Delivery, Endpoint, Link, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from shim_ops import (
    NULL_TERMINUS_GRACE_S,
    AttachOp,
    CloseOp,
    ConnectOp,
    DetachOp,
    DrainOp,
    Op,
    ReceiveOp,
    SendOp,
    failed,
    ok,
)
from shim_records import Arrival, LinkState, Sent
from shim_wire import (
    RCV_MODES,
    SND_MODES,
    TERMINAL,
    BadCommand,
    Unsupported,
    amqp_error,
    body_text,
    check_outcome,
    condition_json,
    error,
    state_json,
    tag_hex,
)

DEFAULT_TIMEOUT_MS = 10_000
EXIT_CLOSE_S = 5.0  # at the end of standard input, how long the connection's close may take
Write = Callable[[dict[str, Any]], None]


class SettleModes(LinkOption):
    """The link's requested ``snd_settle_mode`` and ``rcv_settle_mode`` (a ``LinkOption`` for create_*)."""

    def __init__(self, snd: int, rcv: int) -> None:
        self.snd, self.rcv = snd, rcv

    def apply(self, link: Link) -> None:
        """Set both modes on the link before its attach is sent."""
        link.snd_settle_mode = self.snd
        link.rcv_settle_mode = self.rcv


class _Alarm:
    """A container timer's handler: calls ``action`` when the timer fires."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action

    def on_timer_task(self, event: Any) -> None:
        """The timer fired."""
        self.action()


def _field(command: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """``command[name]`` checked against ``kind``; :class:`BadCommand` naming the field when missing or mistyped."""
    if name not in command:
        if default is ...:
            raise BadCommand(f"{command.get('op')} needs the field {name}")
        return default
    value = command[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadCommand(f"{command.get('op')}: {name} has the wrong type ({value!r})")
    return value


class ShimHandler(MessagingHandler):
    """Runs the contract's commands on one proton ``Container``; one connection at a time."""

    def __init__(self, write: Write, on_exit: Callable[[], None]) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False, peer_close_is_error=False)
        self.write = write
        self.on_exit = on_exit  # stops the container (closes the injector): the process then exits 0
        self.container: Container | None = None  # set by shim.py once the container is made
        self.conn: Any = None  # the live proton Connection, or None
        self.links: dict[str, LinkState] = {}
        self.pending: list[Op] = []
        self.transport_condition: Condition | None = None
        self.exiting = False

    # -- the harness's commands -------------------------------------------------------------------------

    def on_shim_command(self, event: Any) -> None:
        """One command from standard input: run it; reply now, or when proton has the answer."""
        command = event.subject
        command_id = command.get("id") if isinstance(command, dict) else None
        try:
            if not isinstance(command, dict):
                raise BadCommand(f"a command is a JSON object, got {command!r}")
            if not isinstance(command_id, int) or isinstance(command_id, bool):
                raise BadCommand(f"a command needs an integer id, got {command_id!r}")
            op = _field(command, "op", str)
            runner = getattr(self, "cmd_" + op.replace("-", "_"), None)
            if runner is None:
                raise BadCommand(f"unknown op {op!r}")
            result = runner(command)
        except Unsupported as exc:
            result = failed(error("unsupported", str(exc)))
        except BadCommand as exc:
            result = failed(error("client", str(exc)))
        except Exception as exc:  # proton refused a call: the library's class and message
            result = failed(error("client", f"{type(exc).__name__}: {exc}"))
        if isinstance(result, Op):
            self.wait(result)
        else:
            self.write({"id": command_id, **result})

    def on_shim_bad_line(self, event: Any) -> None:
        """A line on standard input that is not JSON: a client error reply without an id."""
        self.write({"id": None, **failed(error("client", f"not a JSON command: {event.subject}"))})

    def cmd_hello(self, command: dict[str, Any]) -> dict[str, Any]:
        """The client's names and proton's own version (``proton.VERSION``)."""
        import proton

        return ok(client="python-proton", library="python-qpid-proton",
                  version=".".join(str(part) for part in proton.VERSION), language="python")

    def cmd_connect(self, command: dict[str, Any]) -> Op:
        """``Container.connect(url, reconnect=False, container_id, virtual_host=hostname)``; waits for the open."""
        url = _field(command, "url", str)
        container_id = _field(command, "container_id", str, None)
        hostname = _field(command, "hostname", (str, type(None)), None)
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        if self.conn is not None and self.conn.state & Endpoint.LOCAL_CLOSED:
            self.retire(self.conn)  # an earlier close timed out: that connection is given up
        if self.conn is not None:
            raise BadCommand("already connected: close first")
        assert self.container is not None
        options: dict[str, Any] = {"reconnect": False, "allow_insecure_mechs": True}
        if container_id:
            options["container_id"] = container_id
        if hostname:
            options["virtual_host"] = hostname
        self.links = {}
        self.transport_condition = None
        self.conn = self.container.connect(url=url, **options)
        self.conn.shim_live = True
        return ConnectOp(command["id"], timeout_ms, self.conn)

    def cmd_attach(self, command: dict[str, Any]) -> Op:
        """``Container.create_sender``/``create_receiver`` named after the harness's link, with the settle modes."""
        name = _field(command, "link", str)
        role = _field(command, "role", str)
        address = _field(command, "address", str)
        snd = _field(command, "snd_settle_mode", str, "unsettled")
        rcv = _field(command, "rcv_settle_mode", str, "first")
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        conn = self.live_connection()
        if role not in ("sender", "receiver"):
            raise BadCommand(f"role must be sender or receiver, got {role!r}")
        if snd not in SND_MODES or rcv not in RCV_MODES:
            raise BadCommand(f"settle modes must be one of {', '.join(SND_MODES)} and {', '.join(RCV_MODES)}, "
                             f"got {snd!r} and {rcv!r}")
        if name in self.links and self.links[name].ended is None:
            raise BadCommand(f"link {name!r} is attached already")
        assert self.container is not None
        options = SettleModes(SND_MODES[snd], RCV_MODES[rcv])
        if role == "sender":
            link = self.container.create_sender(conn, target=address, name=name, options=options)
        else:
            link = self.container.create_receiver(conn, source=address, name=name, options=options)
        state = LinkState(name, link, role)
        link.shim_state = state
        self.links[name] = state
        return AttachOp(command["id"], timeout_ms, state)

    def cmd_send(self, command: dict[str, Any]) -> Op:
        """``Sender.send(Message(body))`` per message; ``Delivery.settle()`` at once for a pre-settled one."""
        state = self.link_named(command, "sender")
        messages = _field(command, "messages", list)
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("body"), str) \
                    or not isinstance(message.get("settled", False), bool):
                raise BadCommand(f"a message is {{\"body\": STRING, \"settled\": BOOL}}, got {message!r}")
        sent = []
        for index, message in enumerate(messages):
            delivery = state.link.send(Message(body=message["body"]))
            record = Sent(index, state.name, delivery, tag_hex(delivery), api=["Sender.send()"])
            delivery.shim_record = record
            if state.link.snd_settle_mode == Link.SND_SETTLED:
                record.api[0] = "Sender.send() (settles it: snd-settle-mode settled)"
                record.locally_settled = record.done = True
            elif message.get("settled", False):
                delivery.settle()
                record.api.append("Delivery.settle() before the transfer went out")
                record.locally_settled = record.done = True
            sent.append(record)
        return SendOp(command["id"], timeout_ms, state.name, sent)

    def cmd_receive(self, command: dict[str, Any]) -> Op:
        """``Receiver.flow(n)`` for what is missing, then the outcome on each message as it arrives."""
        state = self.link_named(command, "receiver")
        count = _field(command, "count", int)
        outcome = check_outcome(_field(command, "outcome", dict))
        settle = _field(command, "settle", bool, True)
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        if count < 0:
            raise BadCommand(f"count must be 0 or more, got {count}")
        missing = count - len(state.inbox) - state.link.credit
        if missing > 0:
            state.link.flow(missing)
        return ReceiveOp(command["id"], timeout_ms, state, count, outcome, settle)

    def cmd_drain(self, command: dict[str, Any]) -> Op:
        """``Receiver.drain(credit)``: the credit and drain in one flow; answered once the drain ended
        (:class:`DrainOp`). A message that arrives meanwhile waits in the link's inbox for a later receive."""
        state = self.link_named(command, "receiver")
        credit = _field(command, "credit", int)
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        if credit < 1:
            raise BadCommand(f"credit must be 1 or more, got {credit}")
        state.link.drain(credit)
        return DrainOp(command["id"], timeout_ms, state)

    def cmd_detach(self, command: dict[str, Any]) -> Op:
        """``Link.close()`` (``close``: true) or ``Link.detach()``; waits for the peer's detach."""
        state = self.link_named(command, None)
        close = _field(command, "close", bool, True)
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        state.ended = "closed" if close else "detached"
        if close:
            state.link.close()
        else:
            state.link.detach()
        return DetachOp(command["id"], timeout_ms, state)

    def cmd_close(self, command: dict[str, Any]) -> Op | dict[str, Any]:
        """``Connection.close()``; waits for the peer's close. With no connection open there is nothing to do."""
        timeout_ms = _field(command, "timeout_ms", int, DEFAULT_TIMEOUT_MS)
        if self.conn is None:
            return ok(was_open=False)
        conn = self.conn
        conn.close()
        return CloseOp(command["id"], timeout_ms, conn)

    def live_connection(self) -> Any:
        """The open connection; :class:`BadCommand` before ``connect`` or after it ended."""
        if self.conn is None:
            raise BadCommand("not connected: send connect first")
        return self.conn

    def link_named(self, command: dict[str, Any], role: str | None) -> LinkState:
        """The command's ``link``, attached and of ``role``; :class:`BadCommand` naming what is wrong."""
        self.live_connection()
        name = _field(command, "link", str)
        state = self.links.get(name)
        if state is None:
            raise BadCommand(f"no link named {name!r} on this connection")
        if state.ended is not None:
            raise BadCommand(f"link {name!r} is {state.ended}")
        if role is not None and state.role != role:
            raise BadCommand(f"link {name!r} is a {state.role}, not a {role}")
        return state

    # -- waiting commands ------------------------------------------------------------------------------------

    def wait(self, op: Op) -> None:
        """Keep ``op`` until it has its reply: now, after an event, or at its timeout."""
        self.pending.append(op)
        assert self.container is not None
        op.timer = self.container.schedule(op.timeout_ms / 1000.0, _Alarm(lambda: self.expire(op)))
        if isinstance(op, AttachOp):
            self.container.schedule(min(NULL_TERMINUS_GRACE_S, op.timeout_ms / 1000.0),
                                    _Alarm(lambda: self.grace_over(op)))
        self.progress()

    def grace_over(self, op: AttachOp) -> None:
        """An attach's moment for a refusing detach after a null terminus has passed."""
        op.grace_over = True
        self.progress()

    def expire(self, op: Op) -> None:
        """``op``'s ``timeout_ms`` passed: its reply as :meth:`Op.expire` gives it."""
        if op in self.pending:
            self.finish(op, op.expire())

    def progress(self) -> None:
        """Give every waiting command that now has its reply that reply."""
        for op in list(self.pending):
            if op in self.pending:
                reply = op.check()
                if reply is not None:
                    self.finish(op, reply)

    def finish(self, op: Op, reply: dict[str, Any]) -> None:
        """Write ``op``'s reply and forget it."""
        self.pending.remove(op)
        if op.timer is not None:
            op.timer.cancel()
        self.write({"id": op.id, **reply})

    def fail(self, link: str | None, error_object: dict[str, Any], everything: bool = False) -> bool:
        """Fail each waiting command that the end of ``link`` (None: session or connection) answers; whether any."""
        found = [op for op in self.pending if everything or op.depends_on(link)]
        for op in found:
            self.finish(op, failed(error_object))
        return bool(found)

    # -- what proton tells the shim: deliveries ---------------------------------------------------------

    def on_accepted(self, event: Any) -> None:
        """The receiver accepted a sent message."""
        self.sender_update(event.delivery, "on_accepted", Delivery.ACCEPTED)

    def on_rejected(self, event: Any) -> None:
        """The receiver rejected a sent message."""
        self.sender_update(event.delivery, "on_rejected", Delivery.REJECTED)

    def on_released(self, event: Any) -> None:
        """The receiver released or modified a sent message (MessagingHandler calls on_released for both, and
        ``Delivery.remote_state`` tells them apart)."""
        modified = event.delivery.remote_state == Delivery.MODIFIED
        self.sender_update(event.delivery, "on_released (remote_state MODIFIED)" if modified else "on_released",
                           Delivery.MODIFIED if modified else Delivery.RELEASED)

    def sender_update(self, delivery: Delivery, callback: str, told: int) -> None:
        """Record the outcome a callback told of a sent delivery (``told``, with ``Delivery.remote``'s fields):
        the callback is how the API tells its caller the outcome; ``on_settled`` tells settlement only. Under the
        receiver's ``rcv-settle-mode`` second a terminal state the receiver left unsettled is settled here (the
        sender settles first): proton leaves that to the application."""
        record = getattr(delivery, "shim_record", None)
        if not isinstance(record, Sent) or not self.is_live(delivery.connection):
            return
        record.remote_state = state_json(told, delivery.remote)
        record.remote_settled = bool(delivery.settled)
        record.api.append(callback)
        if (delivery.remote_state in TERMINAL and not delivery.settled and not record.locally_settled
                and delivery.link.remote_rcv_settle_mode == Link.RCV_SECOND):
            delivery.settle()
            record.locally_settled = record.done = True
            record.api.append("Delivery.settle() (rcv-settle-mode second: the sender settles first)")
        self.after_update(record)

    def on_settled(self, event: Any) -> None:
        """The peer settled a delivery: a sent one is settled here too; a received one once it is disposed of."""
        delivery = event.delivery
        record = getattr(delivery, "shim_record", None)
        if record is None or not self.is_live(delivery.connection):
            return
        record.remote_settled = True
        if isinstance(record, Sent):
            record.api.append("on_settled")
            if not record.locally_settled:
                delivery.settle()
                record.locally_settled = True
                record.api.append("Delivery.settle()")
            record.done = True
        else:
            record.remote_state = state_json(delivery.remote_state, delivery.remote)
            if record.disposed is not None and not record.locally_settled:
                delivery.settle()
                record.locally_settled = True
        self.after_update(record)

    def after_update(self, record: Sent | Arrival) -> None:
        """Answer what waits on the record, or, when its command was answered already, report the news."""
        if record.reported:
            news: dict[str, Any] = {"event": "delivery-update", "link": record.link, "index": record.index,
                                    "tag": record.tag, "remote_state": record.remote_state,
                                    "remote_settled": record.remote_settled, "locally_settled": record.locally_settled}
            if isinstance(record, Sent):
                news["api"] = "; ".join(record.api)
            self.write(news)
        self.progress()

    def on_message(self, event: Any) -> None:
        """A whole message arrived: keep it for the receive that takes it (credit is only given by receive)."""
        delivery = event.delivery
        state = getattr(delivery.link, "shim_state", None)
        if state is None or not self.is_live(delivery.connection):
            return
        message = event.message
        arrival = Arrival(state.name, delivery, body_text(message.body), tag_hex(delivery), bool(delivery.settled),
                          message.delivery_count, message.first_acquirer)
        arrival.remote_settled = bool(delivery.settled)
        arrival.remote_state = state_json(delivery.remote_state, delivery.remote)
        delivery.shim_record = arrival
        state.inbox.append(arrival)
        state.last_told_by = "on_message"
        self.progress()

    def on_aborted(self, event: Any) -> None:
        """The broker aborted a delivery (AMQP 1.0 2.6.14): proton discards it and settles it after this callback,
        which uses the credit it came on (004 pn_delivery_aborted). A receive still waiting on the link issues that
        credit again with ``Receiver.flow(1)``, as 004 says ("use pn_link_flow() to issue new credit as for a
        successful delivery"): the message it waits for is still to come."""
        state = getattr(event.link, "shim_state", None)
        if state is None or not self.is_live(event.connection):
            return
        if any(isinstance(op, ReceiveOp) and op.state is state for op in self.pending):
            event.link.flow(1)
            state.last_told_by = "on_aborted"

    # -- what proton tells the shim: endpoints ----------------------------------------------------------

    def on_connection_opened(self, event: Any) -> None:
        """The open exchange is done: answers connect."""
        self.progress()

    def on_link_opened(self, event: Any) -> None:
        """The peer's attach arrived: answers attach, naming this callback as what told it."""
        state = getattr(event.link, "shim_state", None)
        if state is not None:
            state.opened_by = "on_link_opened"
        self.progress()

    def on_link_flow(self, event: Any) -> None:
        """The broker's flow: on a receiving link it may end a drain (:class:`DrainOp`); on a sending link with
        drain set (``Link.drain_mode``; AMQP 1.0 2.6.7) it is a ``drain-requested`` event, and, with no message
        queued on the link (``Link.queued``), ``Link.drained()``, as an application with nothing to send answers it:
        proton moves the delivery-count through the credit left and writes the flow that says so."""
        link, state = event.link, getattr(event.link, "shim_state", None)
        if state is not None and link.is_receiver:  # may end a drain (DrainOp)
            state.last_told_by = "on_link_flow"
            self.progress()
        if state is None or not link.is_sender or not link.drain_mode or not link.credit:
            return
        self.write({"event": "drain-requested", "link": state.name, "api": "on_link_flow, Link.drain_mode true"})
        if not link.queued:
            link.drained()

    def on_link_remote_detach(self, event: Any) -> None:
        """The peer detached a link without closing it (proton has no MessagingHandler callback for that)."""
        self.link_ended(event.link, closed=False)

    def on_link_remote_close(self, event: Any) -> None:
        """The peer closed a link (MessagingHandler's EndpointStateHandler answers with a close after this)."""
        self.link_ended(event.link, closed=True)

    def link_ended(self, link: Link, closed: bool) -> None:
        """Answer the detach that waited for this, else fail what waited on the link, else report an event.

        A detach that is not a close is answered with ``Link.detach()``: proton does not answer it by itself.
        """
        state = getattr(link, "shim_state", None)
        if state is None or not self.is_live(link.connection):
            return
        condition = link.remote_condition
        state.remote_detached, state.remote_closed = True, closed
        ours = [op for op in self.pending if isinstance(op, DetachOp) and op.state is state]
        for op in ours:
            op.condition = condition
        self.progress()
        failed_any = self.fail(state.name, amqp_error("link", condition))
        if not ours and not failed_any:
            self.report_end("link", condition, link=state.name, closed=closed)
        if state.ended is None:
            state.ended = "closed by the peer" if closed else "detached by the peer"
            if not closed:
                link.detach()

    def on_session_remote_close(self, event: Any) -> None:
        """The peer ended the session: every link of it ends with it."""
        if not self.is_live(event.connection):
            return
        condition = event.session.remote_condition
        for state in self.links.values():
            state.ended = state.ended or "ended with its session"
        if not self.fail(None, amqp_error("session", condition)):
            self.report_end("session", condition)

    def on_connection_remote_close(self, event: Any) -> None:
        """The peer closed the connection: answers close, or fails what waited, or is reported as an event."""
        conn = event.connection
        if not self.is_live(conn):
            return
        condition = conn.remote_condition
        answered = any(isinstance(op, CloseOp) for op in self.pending)
        self.progress()
        failed_any = self.fail(None, amqp_error("connection", condition))
        if not failed_any and (not answered or condition is not None):  # a close that answers ours may carry an
            self.report_end("connection", condition)  # error too: proton tells it (remote_condition), so do we
        if condition is not None and condition.name == "amqp:connection:forced":
            conn.close()  # MessagingHandler's EndpointStateHandler leaves exactly this one unanswered
        self.retire(conn)

    def on_transport_error(self, event: Any) -> None:
        """proton's transport failed (the socket, SASL, framing): kept for the transport's close that follows."""
        if self.is_live(event.connection):
            self.transport_condition = event.transport.condition

    def on_transport_closed(self, event: Any) -> None:
        """The transport ended before the peer's close: fails everything waiting, else an ``error`` event marked
        ``"transport": true`` (its condition is proton's own, e.g. ``amqp:connection:framing-error`` "connection
        aborted" for a dropped socket, not one the peer sent)."""
        conn = event.connection
        if not self.is_live(conn):
            return
        condition = self.transport_condition or event.transport.condition
        name, description = condition_json(condition)
        if name == "amqp:unauthorized-access":  # the peer's SASL outcome, as proton reports it
            problem = amqp_error("connection", condition)
        else:
            problem = error("client", f"transport closed: {name}: {description}" if name
                            else "transport closed before the peer's close")
        if not self.fail(None, problem, everything=True):
            self.write({"event": "error", "scope": "connection", "transport": True, "condition": name,
                        "description": description})
        self.retire(conn)

    def on_connection_error(self, event: Any) -> None:
        """Nothing: the peer's close is handled in :meth:`on_connection_remote_close` (MessagingHandler logs)."""

    def on_session_error(self, event: Any) -> None:
        """Nothing: MessagingHandler would close the connection; the end is handled on its remote event."""

    def on_link_error(self, event: Any) -> None:
        """Nothing: MessagingHandler would close the connection; the detach is handled on its remote event."""

    def report_end(self, scope: str, condition: Condition | None, **fields: Any) -> None:
        """An endpoint the peer ended while no command waited on it: ``error`` with a condition, else
        ``remote-close``."""
        name, description = condition_json(condition)
        self.write({"event": "error" if name else "remote-close", "scope": scope, **fields, "condition": name,
                    "description": description})

    def is_live(self, conn: Any) -> bool:
        """Whether ``conn`` is this cycle's connection (events of an earlier one are not reported)."""
        return conn is not None and bool(getattr(conn, "shim_live", False)) and self.conn is not None

    def retire(self, conn: Any) -> None:
        """The connection is over: nothing more of it is reported; the next command may be connect."""
        conn.shim_live = False
        self.conn = None
        for state in self.links.values():
            state.ended = state.ended or "gone with its connection"
        if self.exiting:
            self.on_exit()

    # -- the end of standard input ---------------------------------------------------------------------------

    def on_shim_eof(self, event: Any) -> None:
        """Standard input closed: close the connection (up to :data:`EXIT_CLOSE_S`), then stop."""
        self.exiting = True
        if self.conn is None:
            self.on_exit()
            return
        if not self.conn.state & Endpoint.LOCAL_CLOSED:
            self.conn.close()
        assert self.container is not None
        self.container.schedule(EXIT_CLOSE_S, _Alarm(self.on_exit))


def log(line: str) -> None:
    """A diagnostic line on standard error (the harness keeps it as evidence)."""
    print(f"python-proton shim: {line}", file=sys.stderr, flush=True)

"""Commands waiting for proton: each says, whenever asked, whether it has its reply yet.

The handler (``shim_handler.py``) asks every waiting command after each proton event (:meth:`Op.check`),
gives the reply at its ``timeout_ms`` (:meth:`Op.expire`), or fails it when the endpoint it waits on ends
(:meth:`Op.depends_on`). A reply here is the object without its ``id``, which the handler adds.
"""

from __future__ import annotations

from typing import Any

from proton import Connection, Endpoint
from shim_records import Arrival, LinkState, Sent
from shim_wire import RCV_MODES, SND_MODES, amqp_error, error, give_outcome, is_null_terminus, mode_name, to_json

NULL_TERMINUS_GRACE_S = 1.0  # after an attach with a null terminus, how long the detach that refuses it may take;
# also how long an attach reply waits for on_link_opened once proton says the link is remote-active


def ok(**fields: Any) -> dict[str, Any]:
    """A successful reply with ``fields``."""
    return {"ok": True, **fields}


def failed(error_object: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A failed reply carrying ``error_object`` (see ``shim_wire.error``) and any extra ``fields``."""
    return {"ok": False, "error": error_object, **fields}


class Op:
    """A command in progress: its ``id``, ``op``, and ``timeout_ms``; subclasses say when it is answered."""

    def __init__(self, command_id: Any, op: str, timeout_ms: int) -> None:
        self.id = command_id
        self.op = op
        self.timeout_ms = timeout_ms
        self.timer: Any = None  # the container's Task for the timeout, cancelled once answered

    def check(self) -> dict[str, Any] | None:
        """The reply when the command is answered, else None (asked again after the next event)."""
        return None

    def expire(self) -> dict[str, Any]:
        """The reply when ``timeout_ms`` passed first: a ``timeout`` error unless the subclass knows better."""
        return failed(error("timeout", f"no answer to {self.op} within {self.timeout_ms} ms"))

    def depends_on(self, link: str | None) -> bool:
        """Whether the end of link ``link`` (None: of the connection or session) answers this command."""
        return True


class ConnectOp(Op):
    """``connect``: answered when the peer's open arrives."""

    def __init__(self, command_id: Any, timeout_ms: int, connection: Connection) -> None:
        super().__init__(command_id, "connect", timeout_ms)
        self.connection = connection

    def check(self) -> dict[str, Any] | None:
        """The broker's container-id (``Connection.remote_container``), properties and capabilities
        (``remote_properties``, ``remote_offered_capabilities``, ``remote_desired_capabilities``) once the open
        exchange is done."""
        connection = self.connection
        if connection.state & Endpoint.REMOTE_ACTIVE:
            return ok(remote_container=connection.remote_container,
                      remote_properties=to_json(connection.remote_properties),
                      remote_offered_capabilities=to_json(connection.remote_offered_capabilities),
                      remote_desired_capabilities=to_json(connection.remote_desired_capabilities))
        return None


class AttachOp(Op):
    """``attach``: answered when ``on_link_opened`` tells that the peer's attach arrived; a null terminus waits a
    moment for its detach. Proton's link state may say REMOTE_ACTIVE before the callback comes (an event of the
    same read dispatched first): the reply waits for the callback, or, should it never come, for the moment's
    end (``grace_over``), and then says so (``api`` null)."""

    def __init__(self, command_id: Any, timeout_ms: int, state: LinkState) -> None:
        super().__init__(command_id, "attach", timeout_ms)
        self.state = state
        self.grace_over = False  # set by a timer NULL_TERMINUS_GRACE_S after a null terminus was seen
        self.saw_null_terminus = False

    def check(self) -> dict[str, Any] | None:
        """The peer's settle modes (``Link.remote_snd_settle_mode``/``remote_rcv_settle_mode``), properties and
        max-message-size (``remote_properties``, ``remote_max_message_size``: 0 for none; proton's Python API has
        no accessor for a link's capabilities, so the reply leaves them out) once attached, and ``api``: the
        callback that told the shim so (null when the reply came without one, from a timer)."""
        link = self.state.link
        if not link.state & Endpoint.REMOTE_ACTIVE:
            return None
        terminus = link.remote_target if self.state.role == "sender" else link.remote_source
        if is_null_terminus(terminus) and not self.grace_over:
            self.saw_null_terminus = True
            return None
        if self.state.opened_by is None and not self.grace_over:
            return None
        return ok(remote_snd_settle_mode=mode_name(SND_MODES, link.remote_snd_settle_mode),
                  remote_rcv_settle_mode=mode_name(RCV_MODES, link.remote_rcv_settle_mode),
                  remote_properties=to_json(link.remote_properties),
                  remote_max_message_size=link.remote_max_message_size, api=self.state.opened_by)

    def expire(self) -> dict[str, Any]:
        """A timeout, or the attach as it stands when the peer attached with a null terminus and no detach."""
        self.grace_over = True
        found = self.check()
        return found if found is not None else super().expire()

    def depends_on(self, link: str | None) -> bool:
        """Its own link, the session and the connection."""
        return link is None or link == self.state.name


class SendOp(Op):
    """``send``: answered once every message reached what it will reach, or at the timeout as they stand."""

    def __init__(self, command_id: Any, timeout_ms: int, link: str, sent: list[Sent]) -> None:
        super().__init__(command_id, "send", timeout_ms)
        self.link = link
        self.sent = sent

    def check(self) -> dict[str, Any] | None:
        """Every report, once each message is settled both ways (or was sent pre-settled)."""
        return self.reply() if all(s.done for s in self.sent) else None

    def expire(self) -> dict[str, Any]:
        """Every report as it stands at the timeout (what arrives later becomes ``delivery-update`` events)."""
        return self.reply()

    def reply(self) -> dict[str, Any]:
        """The reply with the reports as they stand; later news about these deliveries is an event."""
        for sent in self.sent:
            sent.reported = True
        return ok(deliveries=[s.report() for s in self.sent])

    def depends_on(self, link: str | None) -> bool:
        """Its own link, the session and the connection."""
        return link is None or link == self.link


class ReceiveOp(Op):
    """``receive``: takes ``count`` messages as they arrive, disposes of each at once, answers when done."""

    def __init__(self, command_id: Any, timeout_ms: int, state: LinkState, count: int, outcome: dict[str, Any],
                 settle: bool) -> None:
        super().__init__(command_id, "receive", timeout_ms)
        self.state = state
        self.count = count
        self.outcome = outcome
        self.settle = settle
        self.taken: list[Arrival] = []

    def check(self) -> dict[str, Any] | None:
        """Every report once ``count`` messages arrived and each has its outcome. With ``settle`` false a
        delivery the sender has not settled yet is reported unsettled (as an application sees it then):
        the shim settles it when the sender does, and tells that in a ``delivery-update`` event, so a broker
        that never settles costs no time-out."""
        while len(self.taken) < self.count and self.state.inbox:
            self.dispose(self.state.inbox.popleft())
        if len(self.taken) == self.count:
            return self.reply()
        return None

    def dispose(self, arrival: Arrival) -> None:
        """Give ``arrival`` the command's outcome (``Delivery.update``), settling it when the command says so or
        when the sender has settled already."""
        arrival.index = len(self.taken)
        self.taken.append(arrival)
        give_outcome(arrival.delivery, self.outcome)
        arrival.disposed = dict(self.outcome)
        if self.settle or arrival.remote_settled:
            arrival.delivery.settle()
            arrival.locally_settled = True

    def expire(self) -> dict[str, Any]:
        """A ``timeout`` error naming how many arrived, with their reports."""
        return failed(error("timeout", f"{len(self.taken)} of {self.count} messages within {self.timeout_ms} ms"),
                      deliveries=self.reports())

    def reply(self) -> dict[str, Any]:
        """The reply with every report; later news about these deliveries is an event."""
        return ok(deliveries=self.reports())

    def reports(self) -> list[dict[str, Any]]:
        """The reports of what was taken so far, marked as reported."""
        for arrival in self.taken:
            arrival.reported = True
        return [a.report() for a in self.taken]

    def depends_on(self, link: str | None) -> bool:
        """Its own link, the session and the connection."""
        return link is None or link == self.state.name


class DrainOp(Op):
    """``drain``: answered once proton says the receiving link no longer drains (``Link.draining()`` false: the
    broker's flow, or its transfers, used up the credit the drain asked it to), which ends the drain here
    (``Link.drain_mode`` back to false, as Proton C++ does before ``on_receiver_drain_finish``)."""

    def __init__(self, command_id: Any, timeout_ms: int, state: LinkState) -> None:
        super().__init__(command_id, "drain", timeout_ms)
        self.state = state

    def check(self) -> dict[str, Any] | None:
        """Done once the link drains no more, with the callback that told it and the link's credit then."""
        link = self.state.link
        if link.draining():
            return None
        link.drain_mode = False
        return ok(api=f"{self.state.last_told_by}, Link.draining() false", credit=link.credit)

    def expire(self) -> dict[str, Any]:
        """A ``timeout`` error naming the credit still undrained."""
        return failed(error("timeout", f"the drain had not ended within {self.timeout_ms} ms (Link.draining() "
                                       f"true, credit {self.state.link.credit})"))

    def depends_on(self, link: str | None) -> bool:
        """Its own link, the session and the connection."""
        return link is None or link == self.state.name


class DetachOp(Op):
    """``detach``: answered when the peer's detach arrives."""

    def __init__(self, command_id: Any, timeout_ms: int, state: LinkState) -> None:
        super().__init__(command_id, "detach", timeout_ms)
        self.state = state
        self.condition: Any = None  # the peer's detach's error, set by the handler

    def check(self) -> dict[str, Any] | None:
        """Done, with the peer's detach's ``closed`` flag as ``remote_closed``; its error, if it carried one."""
        if not self.state.remote_detached:
            return None
        if self.condition is not None:
            return failed(amqp_error("link", self.condition), remote_closed=self.state.remote_closed)
        return ok(remote_closed=self.state.remote_closed)

    def depends_on(self, link: str | None) -> bool:
        """The session and the connection (its own link's detach is its answer, not a failure)."""
        return link is None


class CloseOp(Op):
    """``close``: answered when the peer's close arrives."""

    def __init__(self, command_id: Any, timeout_ms: int, connection: Connection) -> None:
        super().__init__(command_id, "close", timeout_ms)
        self.connection = connection

    def check(self) -> dict[str, Any] | None:
        """Done once the peer closed too; its close's error, if it carried one."""
        if not self.connection.state & Endpoint.REMOTE_CLOSED:
            return None
        if self.connection.remote_condition is not None:
            return failed(amqp_error("connection", self.connection.remote_condition))
        return ok()

    def depends_on(self, link: str | None) -> bool:
        """Nothing ends it but the peer's close (or the transport's end), which the handler reports itself."""
        return False

"""Conformant variants of the reference broker: each differs from it only where the sources leave the choice open.

A mutant (:mod:`.mutants`) breaks a guarantee and the catalogue must FAIL it. A conformant variant keeps
every guarantee and makes one choice the sources leave to the broker another way; the catalogue must PASS it
as it passes the reference (``selftest`` runs each beside the baseline). A row, or a script, that FAILs or
ERRORs one has taken the reference's choice for a rule: the over-constraint this guards against. The
``every-choice`` variants make all of them otherwise at once but credit-once, which would leave most rows unable
to run (the mutation run's last pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, Endpoint, Event, Link, SymbolList, symbol, uint, ulong

from ..amqp_types import BY_NAME
from ..frames import DEFAULT_SIZE_LIMIT, FRAME_TYPE_AMQP, Frame, encode_frame
from .accounts import ClientCertificate, OneAccount, RouterOneAccount
from .broker import Broker, BrokerConnection
from .mutant_kit import Mutant, RewritingBroker, RewritingConnection
from .router import Router
from .stated_flow import SenderFlowStates
from .wrapping_counts import CountsNearWrap, Performative, RouterCountsNearWrap, WrappingConnection

HIDDEN_LINKS = 3  # link endpoints each session of the variant holds before any of the client's
HIDDEN_PREFIX = "conformant-variant-hidden-"
HIDDEN_SESSIONS = 2  # sessions each connection of the variant begins before any of the client's
# the performatives of a session (2.7.2-2.7.8); open, close and empty frames on channel 0 belong to the connection
SESSION_PERFORMATIVES = ("begin", "attach", "flow", "transfer", "disposition", "detach", "end")
MIN_MAX_FRAME_SIZE = 512  # AMQP 1.0 2.7.1: the least max-frame-size a peer may offer


class HandlesFromThree(Broker):
    """Numbers the link endpoints it attaches from :data:`HIDDEN_LINKS` (3) instead of 0.

    2.6.2 leaves the choice of a handle to its endpoint (any unused one up to the session's handle-max), and
    a peer must address the broker's frames by the broker's handles, never assume they equal its own. proton
    gives a link the lowest free handle of its session, so each session first attaches :data:`HIDDEN_LINKS`
    links of its own that never reach the wire (their attach frames are dropped): every handle the client sees
    is proton's own, encoded by proton, frames sized by it."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose output leaves out the hidden links' attach frames."""
        return RewritingConnection(self, peer_name, _without_hidden_attach)

    def _on_pn_session_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        super()._on_pn_session_remote_open(connection, event)
        for index in range(HIDDEN_LINKS):
            event.session.sender(f"{HIDDEN_PREFIX}{index}").open()


class RouterHandlesFromThree(HandlesFromThree, Router):
    """The router mode of :class:`HandlesFromThree`."""


class ChannelsFromTwo(Broker):
    """Numbers its sessions' channels from :data:`HIDDEN_SESSIONS` (2) instead of 0: 2.5.1 lets each end of a
    session choose its own channel, so the broker's begin answering the client's channel 0 comes on channel 2.
    Each connection first begins :data:`HIDDEN_SESSIONS` sessions of its own that never reach the wire (their
    frames are dropped), so proton allocates and writes every channel the client sees."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose output leaves out every frame on the hidden sessions' channels."""
        return RewritingConnection(self, peer_name, _without_hidden_sessions())

    def _on_pn_connection_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        super()._on_pn_connection_remote_open(connection, event)
        for _ in range(HIDDEN_SESSIONS):
            event.connection.session().open()


class RouterChannelsFromTwo(ChannelsFromTwo, Router):
    """The router mode of :class:`ChannelsFromTwo`."""


def offer_least_max_frame_size(connection: BrokerConnection) -> BrokerConnection:
    """``connection``, set to offer the least max-frame-size 2.7.1 allows (512): whatever the client sends larger
    goes in several transfer frames, and a frame over 512 bytes is a framing error."""
    connection.engine.transport.max_frame_size = MIN_MAX_FRAME_SIZE
    connection.policed.splitter.size_limit = MIN_MAX_FRAME_SIZE
    return connection


class SmallFrames(Broker):
    """Takes frames of at most 512 bytes (2.7.1's MIN-MAX-FRAME-SIZE), the least a broker may offer."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection that offers max-frame-size 512."""
        return offer_least_max_frame_size(BrokerConnection(self, peer_name))


def offer_no_frame_limit(connection: BrokerConnection) -> BrokerConnection:
    """``connection``, set to state no max-frame-size in its open (proton writes the field only for a limit): the
    field's default, 4294967295, so a client may send a frame of any size the 32-bit frame size can hold. What the
    connection's splitter buffers is still bounded (:data:`amqp_conformance.peers.frames.DEFAULT_SIZE_LIMIT`, 16
    MiB, as for any frame the reference reads): no row sends a frame near it."""
    connection.engine.transport.max_frame_size = 0
    connection.policed.splitter.size_limit = DEFAULT_SIZE_LIMIT
    return connection


class NoFrameLimit(Broker):
    """States no max-frame-size in its open (AMQP 1.0 2.7.1: absent, the field's default 4294967295): a client that
    takes a missing field for "no room" or divides by it mangles every message it sends."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose open states no max-frame-size."""
        return offer_no_frame_limit(BrokerConnection(self, peer_name))


class RouterNoFrameLimit(NoFrameLimit, Router):
    """The router mode of :class:`NoFrameLimit`."""


TRANSFER_PARTS = 3  # the transfers SplitsTransfers writes each message it delivers in (fewer for under 3 bytes)


def send_in_parts(link: Link, encoded: bytes, parts: int = TRANSFER_PARTS) -> None:
    """Give ``link``'s current delivery ``encoded`` in ``parts`` pieces of (nearly) equal size, having proton write
    each piece but the last as a transfer frame of its own (``more`` set: the delivery is not yet whole) before the
    next is given. The caller's ``advance`` then writes the last piece with ``more`` unset. A piece larger than the
    receiver's max-frame-size allows goes in several frames, as proton splits any transfer; where the receiver's
    session window is shut, proton holds the pieces and writes what it holds once the window opens."""
    size = max(1, -(-len(encoded) // parts))
    pieces = [encoded[start:start + size] for start in range(0, len(encoded), size)] or [b""]
    for piece in pieces[:-1]:
        link.send(piece)
        link.connection.transport.pending()  # proton writes the delivery's bytes so far, more=true
    link.send(pieces[-1])


class SplitsTransfers(Broker):
    """Delivers every message in three transfer frames (the first two with ``more`` set), however small: how a
    message is split into transfers is the sender's choice (AMQP 1.0 2.6.14, 2.7.5)."""

    def send_message(self, link: Link, encoded: bytes) -> None:
        """``encoded`` in :data:`TRANSFER_PARTS` transfers."""
        send_in_parts(link, encoded)


class RouterSplitsTransfers(SplitsTransfers, Router):
    """The router mode of :class:`SplitsTransfers`: the router also delivers what it routes in three transfers."""


EMPTY_FRAME = encode_frame(b"")  # an AMQP frame with no body (2.3.2): 8 bytes, doff 2, channel 0


class SendsEmptyFrames(RewritingBroker):
    """Writes an empty frame before every AMQP frame it sends after its open: a frame with no body, which a peer
    reads as nothing but traffic (AMQP 1.0 2.3.2; 2.4.5 has it keep a connection from its idle time-out, and a
    broker may send one whenever it likes)."""

    def rewrite(self, frame: Frame) -> bytes:
        """``frame``, an empty frame before it unless it is a header, a SASL frame or the open."""
        return empty_frame_before(frame) + frame.raw


def empty_frame_before(frame: Frame) -> bytes:
    """An empty frame (:data:`EMPTY_FRAME`) to write ahead of ``frame`` when it is an AMQP frame after the open,
    else nothing."""
    if frame.frame_type == FRAME_TYPE_AMQP and frame.performative not in ("open", "amqp-header", "sasl-header"):
        return EMPTY_FRAME
    return b""


class RouterSendsEmptyFrames(SendsEmptyFrames, Router):
    """The router mode of :class:`SendsEmptyFrames`."""


SESSION_WINDOW_FRAMES = 16  # the incoming-window of SmallSessionWindow: room for the catalogue's largest message
# (300000 bytes at proton's 32768-byte frames), which the broker reads only once all of it has come


class SmallSessionWindow(Broker):
    """Offers each session an incoming-window of :data:`SESSION_WINDOW_FRAMES` transfer frames, not proton's
    unbounded one, and widens it again as it reads what came (proton's session flow at half the window): AMQP 1.0
    2.5.6 lets the receiver set its incoming-window, and a client must not send beyond it."""

    def _on_pn_session_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        event.session.incoming_capacity = SESSION_WINDOW_FRAMES * connection.engine.transport.max_frame_size
        super()._on_pn_session_remote_open(connection, event)


class RouterSmallSessionWindow(SmallSessionWindow, Router):
    """The router mode of :class:`SmallSessionWindow`."""


class OneCredit(Broker):
    """Gives a publisher's link one credit at a time: a link-credit of 1, given again once it is spent."""

    publisher_credit = 1


class RouterOneCredit(OneCredit, Router):
    """The router mode of :class:`OneCredit`."""


class CreditOnce(OneCredit):
    """Gives a publisher's link one credit and never gives it back: 2.6.7 lets a receiver withhold credit for as
    long as it likes. A row that needs a second message sent on a link cannot run against it (UNSUPPORTED)."""

    def top_up(self, connection: BrokerConnection) -> None:
        """Give no credit back."""
        connection.credit_due.clear()


class RouterCreditOnce(CreditOnce, Router):
    """The router mode of :class:`CreditOnce`."""


class ReceivesFirst(Broker):
    """Settles what a publisher sends as it takes it, whatever mode the publisher asked for: its receiving links state
    rcv-settle-mode first. AMQP 1.0 2.7.3: the receiver's rcv-settle-mode is the mode in use, the sender's only a wish
    (the sender SHOULD respect a receiver's wish, so the broker's sending links keep the reference's choice)."""

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        super()._on_pn_link_remote_open(connection, event)
        if event.link.is_receiver:
            event.link.rcv_settle_mode = Link.RCV_FIRST  # before proton writes the attach, at the end of the read


class RevokesWithheldCredit(Broker):
    """Withholds a publisher's credit (admin: withhold-credit) by saying so: where the reference sends no flow
    at all, it grants one credit and takes it back at once, a flow of link-credit 1 and then one of 0 in the same
    write. 2.6.7 lets the receiver set the credit as it likes at any time; a flow of 0 grants nothing."""

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        super()._on_pn_link_remote_open(connection, event)
        link = event.link
        withheld = (link.remote_target.address or "") in self.withheld_credit
        if link.is_receiver and withheld and link.state & Endpoint.LOCAL_ACTIVE:
            link.flow(1)
            connection.take_output()  # proton writes the flow of 1 now: a flow of 0 is never written unless
            link.flow(-1)  # the credit it states changed since the last flow, so take the one back after it


class DrainsPublishers(Broker):
    """Asks each publisher to drain the credit it gives it: the first flow to a publisher's link sets drain (AMQP
    1.0 2.6.7: the receiver sets the drain flag as it likes; a sender that has no message to send for the credit
    SHOULD advance its delivery-count through it and say so in a flow). Once the client's flow has taken the link's
    credit to 0 (its drain answer), the broker leaves drain mode and gives the credit again at the end of that read,
    as it tops credit up (:meth:`.Broker.handle`: frames of one read are judged against the credit their sender
    knew of), so a client that answers is given credit for what it sends later; a client that ignores the drain
    uses the credit as given."""

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        super()._on_pn_link_remote_open(connection, event)
        link = event.link
        if link.is_receiver and link.credit > 0 and link.state & Endpoint.LOCAL_ACTIVE:
            link.drain_mode = True  # the flow giving the credit, not yet written, goes out with drain set

    def _on_pn_link_flow(self, connection: BrokerConnection, event: Event) -> None:
        link = event.link
        if link.is_receiver and link.drain_mode and link.credit == 0:
            self.give_credit_back(connection, link)

    def top_up(self, connection: BrokerConnection) -> None:
        """A drained link leaves drain mode before its credit is topped up."""
        for link in connection.credit_due:
            if link.drain_mode and link.credit == 0:
                link.drain_mode = False
        super().top_up(connection)


class RouterDrainsPublishers(DrainsPublishers, Router):
    """The router mode of :class:`DrainsPublishers`."""


def state_flows(connection: BrokerConnection) -> BrokerConnection:
    """``connection``, set to write the broker's flow state for one of its sending links just before it reads each
    flow the client sends for that link (:class:`.stated_flow.SenderFlowStates`): the delivery-count, the credit
    left of the client's last grant, drain as the client last set it, as proton's numbers have them (a connection
    that renumbers on the way out renumbers it too)."""
    states = SenderFlowStates()
    connection.engine.listeners.append(states.note)
    read = connection.inbound

    def inbound(frame: Frame) -> Frame:
        stated = states.flow_before(frame)
        if stated is not None:
            connection.write_outside_proton(stated)
        return read(frame)

    connection.inbound = inbound  # type: ignore[method-assign]
    return connection


class StatesFlowBeforeReading(Broker):
    """States its flow for a consumer's link just before it reads each flow the client sends for it (AMQP 1.0
    2.6.7, 2.7.4: a sender may send its flow state at any time). The state is the one before the client's flow:
    a drain's request or a grant of credit crosses a flow that does not know of it yet, as it would on any network
    where the broker wrote its state a moment earlier. A row that takes any flow of the broker's after a request
    for its answer, or the broker's last flow for one that knew of the client's credit, FAILs this variant."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection that states the broker's flow before it reads each of the client's."""
        return state_flows(BrokerConnection(self, peer_name))


class RouterStatesFlowBeforeReading(StatesFlowBeforeReading, Router):
    """The router mode of :class:`StatesFlowBeforeReading`."""


DRAIN_ANSWER_DELAY_S = 0.05  # how long AnswersDrainsLate lets a drain it has nothing to send for wait


class AnswersDrainsLate(Broker):
    """Answers a consumer's drain :data:`DRAIN_ANSWER_DELAY_S` after it first finds nothing to send for it: the flow
    that uses the credit up comes that much later (AMQP 1.0 2.6.7 sets no time for it; messages stored meanwhile
    go on the credit as usual). A client that tells a drain ended before that flow comes is told apart from one that
    waits for it, which an answer in the same write as the request's other frames cannot show."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drains_waiting: dict[Link, float] = {}  # a consumer's link -> when its drain was first found unanswered

    def finish_drain(self, link: Link) -> None:
        """The drain is answered once it has waited :data:`DRAIN_ANSWER_DELAY_S`."""
        if _drain_unanswered(link):
            asked = self.drains_waiting.setdefault(link, time.monotonic())
            if time.monotonic() < asked + DRAIN_ANSWER_DELAY_S:
                return
        self.drains_waiting.pop(link, None)
        super().finish_drain(link)

    def due_in(self) -> float | None:
        """Seconds until the first waiting drain is to be answered (a link's drain answered otherwise, or ended, or
        on a connection the broker has dropped, no longer waits)."""
        if not self.drains_waiting:  # asked every pass of the server's loop: nothing to work out
            return None
        served = {connection.engine.connection for connection in self.connections}
        for link in [link for link in self.drains_waiting
                     if not _drain_unanswered(link) or link.connection not in served]:
            del self.drains_waiting[link]
        if not self.drains_waiting:
            return None
        return max(0.0, min(self.drains_waiting.values()) + DRAIN_ANSWER_DELAY_S - time.monotonic())


def _drain_unanswered(link: Link) -> bool:
    """Whether ``link``, a consumer's, has credit left that its receiver asked it to drain, and is open."""
    return bool(link.credit > 0 and link.drain_mode and link.state & Endpoint.LOCAL_ACTIVE
                and not link.state & Endpoint.REMOTE_CLOSED)


class RouterAnswersDrainsLate(AnswersDrainsLate, Router):
    """The router mode of :class:`AnswersDrainsLate`."""


class CrossesDrains(AnswersDrainsLate):
    """:class:`StatesFlowBeforeReading` and :class:`AnswersDrainsLate` at once, its counts from 0: a client's drain
    request is crossed by a flow that does not know of it, and the answer comes a while after. Every-choice has both
    too, but its counts near the wrap let a client that states its own delivery-count from 0 (rhea) read credit left
    in the crossing flow; here the crossing flow says link-credit 0, and a client that takes it for the drain's end
    tells the end before the answer reaches the relay."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection that states the broker's flow before it reads each of the client's."""
        return state_flows(BrokerConnection(self, peer_name))


# what StatesEndpointFields states in its open (beside the reference's properties, product and version) and its
# attaches: capabilities no peer acts on (2.7.1 and 2.7.3 let a peer ignore one it does not know), link properties
# of several AMQP types
STATED_MAX_MESSAGE_SIZE = 1 << 20  # 1 MiB: above the catalogue's largest message (300,000 bytes), so no row meets it
STATED_LINK_PROPERTIES = {symbol("x-variant"): "states-endpoint-fields", symbol("x-handles"): uint(HIDDEN_LINKS),
                          symbol("x-durable"): True, symbol("x-limit"): ulong(STATED_MAX_MESSAGE_SIZE)}
STATED_CAPABILITIES = (symbol("x-amqp-conformance-offered"), symbol("x-amqp-conformance-also-offered"))
STATED_DESIRED = (symbol("x-amqp-conformance-desired"),)
STATED_LINK_CAPABILITIES = (symbol("x-amqp-conformance-link-offered"),)
STATED_LINK_DESIRED = (symbol("x-amqp-conformance-link-desired"), symbol("x-amqp-conformance-link-also-desired"))
# 2.7.3: the attach's offered- and desired-capabilities, by their positions in its field list
ATTACH_OFFERED, ATTACH_DESIRED = (BY_NAME["attach"].fields.index(name)
                                  for name in ("offered-capabilities", "desired-capabilities"))


def with_link_capabilities(frame: Frame) -> bytes:
    """The broker's attach with :data:`STATED_LINK_CAPABILITIES` offered and :data:`STATED_LINK_DESIRED` desired
    (proton's Python API sets no capabilities on a link, so they are written into the frame; every other byte
    stays proton's); any other frame as it is."""
    performative = Performative.of(frame) if frame.performative == "attach" else None
    if performative is None:
        return frame.raw
    performative.put(ATTACH_OFFERED, symbol_array(STATED_LINK_CAPABILITIES))
    performative.put(ATTACH_DESIRED, symbol_array(STATED_LINK_DESIRED))
    return performative.frame_bytes(frame)


def symbol_array(symbols: tuple[symbol, ...]) -> Array:
    """Capabilities as 2.7.3 types them, ``symbol`` multiple: an AMQP array of symbols (1.6.5), never a list,
    which proton's codec makes of a Python list (a ``SymbolList`` too) and a client may rightly refuse."""
    return Array(UNDESCRIBED, Data.SYMBOL, *symbols)


class StatesEndpointFields(Broker):
    """States what the reference leaves out of its open and its attaches: offered- and desired-capabilities in its
    open (its properties are the reference's), and properties, a max-message-size of 1 MiB and offered- and
    desired-capabilities in its attaches (AMQP 1.0 2.7.1, 2.7.3: each optional; a capability a peer does not know
    it ignores). A message larger than that limit ends its link with ``amqp:link:message-size-exceeded`` (2.7.3),
    so the limit stated is kept. A client whose API tells these fields is held to them
    (``conformance/interop_told_endpoints.py``). Its attaches are not the reference's bytes, so it is judged
    without exact-encoding (``encodes_otherwise``); it stays out of :class:`EveryChoiceOther`, whose bytes the
    wire rows still judge exactly."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose attaches carry the link capabilities (:func:`with_link_capabilities`)."""
        return RewritingConnection(self, peer_name, with_link_capabilities)

    def _on_pn_connection_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        event.connection.offered_capabilities = SymbolList(STATED_CAPABILITIES)  # the reference's open() takes them
        event.connection.desired_capabilities = SymbolList(STATED_DESIRED)
        super()._on_pn_connection_remote_open(connection, event)

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        event.link.properties = dict(STATED_LINK_PROPERTIES)
        event.link.max_message_size = STATED_MAX_MESSAGE_SIZE
        super()._on_pn_link_remote_open(connection, event)

    def _on_pn_delivery(self, connection: BrokerConnection, event: Event) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver and delivery.pending > STATED_MAX_MESSAGE_SIZE and link.state & Endpoint.LOCAL_ACTIVE:
            delivery.settle()
            too_large = f"a message over the {STATED_MAX_MESSAGE_SIZE} bytes its attach states"
            self.close_link(link, self.condition("amqp:link:message-size-exceeded", too_large))
            return
        super()._on_pn_delivery(connection, event)


class RouterStatesEndpointFields(StatesEndpointFields, Router):
    """The router mode of :class:`StatesEndpointFields`."""


class EveryChoiceOther(HandlesFromThree, ChannelsFromTwo, SplitsTransfers, OneCredit, RevokesWithheldCredit,
                       DrainsPublishers, AnswersDrainsLate, OneAccount):
    """Every choice above made the other way at once: handles from 3, channels from 2, every message delivered in
    three transfers, an empty frame before every frame after the open, one credit at a time, withheld credit granted
    and revoked, each publisher asked to drain its first credit, its flow stated before it reads each of a
    consumer's, a consumer's drain answered late, max-frame-size 512, transfers and deliveries numbered from
    4294967294 (:mod:`.wrapping_counts`), and one account, PLAIN only (:mod:`.accounts`). A mutant of the reference
    that no row catches against the reference may break a guarantee only where the reference's own choices hide it;
    ``scripts/mutation.py`` runs the survivors against this variant too."""

    least_max_frame_size = True

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection that hides the hidden links' and sessions' frames, numbers from near the wrap, writes an
        empty frame before each frame it sends after the open, states the broker's flow before it reads each of a
        consumer's (and offers max-frame-size 512)."""
        rewriters = (_without_hidden_attach, _without_hidden_sessions())
        connection = state_flows(WrappingConnection(self, peer_name, before=empty_frame_before,
                                                    keep=lambda frame: bool(_through_all(rewriters, frame))))
        return offer_least_max_frame_size(connection) if self.least_max_frame_size else connection


class RouterEveryChoiceOther(EveryChoiceOther, Router):
    """The router mode of :class:`EveryChoiceOther`, at the router's own max-frame-size: the reference router
    takes no message in more than one transfer frame (it refuses one with ``amqp:not-implemented``), so at 512
    bytes it would refuse messages the router rows' peers may send whole."""

    least_max_frame_size = False


def _without_hidden_attach(frame: Frame) -> bytes:
    name = frame.fields.get("name") if frame.performative == "attach" else None
    return b"" if isinstance(name, str) and name.startswith(HIDDEN_PREFIX) else frame.raw


def _without_hidden_sessions() -> Callable[[Frame], bytes]:
    """A rewriter (for one connection) that leaves out every frame on the channels of sessions the broker began
    on its own, not answering a begin of the client's."""
    hidden: set[int] = set()

    def rewrite(frame: Frame) -> bytes:
        if frame.performative == "begin" and frame.fields.get("remote-channel") is None:
            hidden.add(frame.channel)  # a begin answering no begin of the client's: one of ours
        on_hidden = frame.channel in hidden and frame.performative in SESSION_PERFORMATIVES
        return b"" if on_hidden else frame.raw

    return rewrite


def _through_all(rewriters: tuple[Callable[[Frame], bytes], ...], frame: Frame) -> bytes:
    """``frame``'s bytes when no rewriter drops it, else nothing (each rewriter either keeps or drops)."""
    return frame.raw if all(rewrite(frame) for rewrite in rewriters) else b""


CONFORMANT: dict[str, Mutant] = {m.name: m for m in (
    Mutant("variant-handles-from-three", f"numbers its link handles from {HIDDEN_LINKS}, not 0",
           "keeps every guarantee (AMQP 1.0 2.6.2: an endpoint chooses its own handles; a client must use the "
           "broker's)", HandlesFromThree),
    Mutant("variant-channels-from-two", f"numbers its session channels from {HIDDEN_SESSIONS}, not 0",
           "keeps every guarantee (AMQP 1.0 2.5.1: each end of a session chooses its own channel)", ChannelsFromTwo),
    Mutant("variant-small-frames", f"offers max-frame-size {MIN_MAX_FRAME_SIZE}, the least 2.7.1 allows",
           "keeps every guarantee (AMQP 1.0 2.7.1: any max-frame-size from 512)", SmallFrames),
    Mutant("variant-no-frame-limit", "states no max-frame-size in its open",
           "keeps every guarantee (AMQP 1.0 2.7.1: max-frame-size is optional, its default 4294967295)",
           NoFrameLimit),
    Mutant("variant-splits-transfers", f"delivers every message in {TRANSFER_PARTS} transfer frames, more=true on all "
           "but the last", "keeps every guarantee (AMQP 1.0 2.6.14: a message may be split over several transfers, "
           "at the sender's choice; 2.7.5 more)", SplitsTransfers),
    Mutant("variant-sends-empty-frames", "writes an empty frame before every frame it sends after its open",
           "keeps every guarantee (AMQP 1.0 2.3.2: a frame with no body is traffic alone; 2.4.5)", SendsEmptyFrames),
    Mutant("variant-small-session-window", f"offers each session an incoming-window of {SESSION_WINDOW_FRAMES} "
           "frames, widened again as it reads", "keeps every guarantee (AMQP 1.0 2.5.6: the receiver sets its "
           "incoming-window; a sender must not send beyond it)", SmallSessionWindow),
    Mutant("variant-one-credit", "gives each publisher one credit at a time",
           "keeps every guarantee (AMQP 1.0 2.6.7: the receiver decides how much credit it gives)", OneCredit),
    Mutant("variant-credit-once", "gives each publisher one credit and never another",
           "keeps every guarantee (AMQP 1.0 2.6.7: a receiver may withhold credit for as long as it likes)",
           CreditOnce),
    Mutant("variant-receives-first", "states rcv-settle-mode first on each publisher's link and settles as it takes "
           "each delivery, whatever mode the publisher asked for", "keeps every guarantee (AMQP 1.0 2.7.3: the "
           "receiver's rcv-settle-mode is the mode in use; the sender's is only a wish)", ReceivesFirst),
    Mutant("variant-revokes-withheld-credit", "withholds a publisher's credit with a flow of 1 and then one of 0, "
           "not by sending no flow", "keeps every guarantee (AMQP 1.0 2.6.7: the receiver sets the credit at any "
           "time)", RevokesWithheldCredit),
    Mutant("variant-counts-near-wrap", "numbers its transfers from 4294967294 and its links' deliveries from "
           "4294967294, so both wrap to 0 within a case", "keeps every guarantee (AMQP 1.0 2.5.6, 2.6.7, 2.7.2, "
           "2.7.3: the sender chooses its next-outgoing-id and initial-delivery-count; 2.8.7: they wrap)",
           CountsNearWrap),
    Mutant("variant-drains-publishers", "sets drain on the credit it gives each publisher, and gives it again once "
           "the publisher has drained it", "keeps every guarantee (AMQP 1.0 2.6.7: the receiver sets the drain flag "
           "as it likes)", DrainsPublishers),
    Mutant("variant-states-flow-before-reading", "states its flow for a consumer's link just before it reads each "
           "flow the client sends for it, as it stood before that flow", "keeps every guarantee (AMQP 1.0 2.6.7, "
           "2.7.4: a sender may send its flow state at any time; a flow written before the client's request reached "
           "it does not know of the request)", StatesFlowBeforeReading),
    Mutant("variant-answers-drains-late", f"answers a consumer's drain {DRAIN_ANSWER_DELAY_S:g} s after it finds "
           "nothing to send for it", "keeps every guarantee (AMQP 1.0 2.6.7: the sender answers a drain once it has "
           "sent what it has, at no set time)", AnswersDrainsLate),
    Mutant("variant-crosses-drains", "states its flow before it reads each of a consumer's flows and answers "
           f"drains {DRAIN_ANSWER_DELAY_S:g} s late, both at once", "keeps every guarantee (AMQP 1.0 2.6.7, 2.7.4)",
           CrossesDrains),
    Mutant("variant-one-account", "has one account: PLAIN takes only its password, ANONYMOUS is not offered",
           "keeps every guarantee (AMQP 1.0 5.3.3.1: the server chooses the mechanisms it offers)", OneAccount),
    Mutant("variant-client-certificate", "is served over TLS, verifies the client's certificate and offers SASL "
           "EXTERNAL first", "keeps every guarantee (AMQP 1.0 5.2: TLS; 5.3.3.1: the server chooses the mechanisms "
           "it offers)", ClientCertificate),
    Mutant("variant-states-endpoint-fields", "states capabilities in its open, properties, capabilities and a "
           f"max-message-size of {STATED_MAX_MESSAGE_SIZE} in its attaches", "keeps every guarantee (AMQP 1.0 2.7.1, "
           "2.7.3: each field optional; an unknown capability is ignored; a larger message ends its link with "
           "message-size-exceeded)", StatesEndpointFields, encodes_otherwise=True),
    Mutant("variant-every-choice", f"handles from {HIDDEN_LINKS}, channels from {HIDDEN_SESSIONS}, messages in "
           f"{TRANSFER_PARTS} transfers, empty frames, one credit at a time, withheld credit revoked, publishers "
           f"drained, flow stated before reading, drains answered late, max-frame-size {MIN_MAX_FRAME_SIZE}, counts "
           "from 4294967294 and one account, all at once", "keeps every guarantee (AMQP 1.0 2.3.2, 2.5.1, 2.5.6, "
           "2.6.2, 2.6.7, 2.6.14, 2.7.1, 2.8.7, 5.3.3.1)", EveryChoiceOther),
    Mutant("variant-router-handles-from-three", f"the router numbers its link handles from {HIDDEN_LINKS}, not 0",
           "keeps every guarantee (AMQP 1.0 2.6.2)", RouterHandlesFromThree, broker_name="reference-router"),
    Mutant("variant-router-channels-from-two", f"the router numbers its session channels from {HIDDEN_SESSIONS}, "
           "not 0", "keeps every guarantee (AMQP 1.0 2.5.1)", RouterChannelsFromTwo, broker_name="reference-router"),
    Mutant("variant-router-no-frame-limit", "the router states no max-frame-size in its open",
           "keeps every guarantee (AMQP 1.0 2.7.1)", RouterNoFrameLimit, broker_name="reference-router"),
    Mutant("variant-router-states-endpoint-fields", "the router states capabilities in its open, properties, "
           f"capabilities and a max-message-size of {STATED_MAX_MESSAGE_SIZE} in its attaches", "keeps every guarantee "
           "(AMQP 1.0 2.7.1, 2.7.3)", RouterStatesEndpointFields, broker_name="reference-router",
           encodes_otherwise=True),
    Mutant("variant-router-splits-transfers", f"the router delivers every message in {TRANSFER_PARTS} transfer "
           "frames, more=true on all but the last", "keeps every guarantee (AMQP 1.0 2.6.14, 2.7.5)",
           RouterSplitsTransfers, broker_name="reference-router"),
    Mutant("variant-router-sends-empty-frames", "the router writes an empty frame before every frame it sends "
           "after its open", "keeps every guarantee (AMQP 1.0 2.3.2, 2.4.5)", RouterSendsEmptyFrames,
           broker_name="reference-router"),
    Mutant("variant-router-small-session-window", f"the router offers each session an incoming-window of "
           f"{SESSION_WINDOW_FRAMES} frames", "keeps every guarantee (AMQP 1.0 2.5.6)", RouterSmallSessionWindow,
           broker_name="reference-router"),
    Mutant("variant-router-one-credit", "the router gives each producer one credit at a time",
           "keeps every guarantee (AMQP 1.0 2.6.7)", RouterOneCredit, broker_name="reference-router"),
    Mutant("variant-router-credit-once", "the router gives each producer one credit and never another",
           "keeps every guarantee (AMQP 1.0 2.6.7)", RouterCreditOnce, broker_name="reference-router"),
    Mutant("variant-router-counts-near-wrap", "the router numbers its transfers from 4294967294 and its links' "
           "deliveries from 4294967294", "keeps every guarantee (AMQP 1.0 2.5.6, 2.6.7, 2.8.7)",
           RouterCountsNearWrap, broker_name="reference-router"),
    Mutant("variant-router-drains-publishers", "the router sets drain on the credit it gives each producer",
           "keeps every guarantee (AMQP 1.0 2.6.7)", RouterDrainsPublishers, broker_name="reference-router"),
    Mutant("variant-router-states-flow-before-reading", "the router states its flow for a consumer's link just "
           "before it reads each flow the client sends for it", "keeps every guarantee (AMQP 1.0 2.6.7, 2.7.4)",
           RouterStatesFlowBeforeReading, broker_name="reference-router"),
    Mutant("variant-router-answers-drains-late", f"the router answers a consumer's drain {DRAIN_ANSWER_DELAY_S:g} s "
           "after it finds nothing to send for it", "keeps every guarantee (AMQP 1.0 2.6.7)", RouterAnswersDrainsLate,
           broker_name="reference-router"),
    Mutant("variant-router-one-account", "the router has one account: PLAIN takes only its password",
           "keeps every guarantee (AMQP 1.0 5.3.3.1)", RouterOneAccount, broker_name="reference-router"),
    Mutant("variant-router-every-choice", f"the router: handles from {HIDDEN_LINKS}, channels from "
           f"{HIDDEN_SESSIONS}, messages in {TRANSFER_PARTS} transfers, empty frames, one credit at a time, withheld "
           "credit revoked, publishers drained, flow stated before reading, drains answered late, counts from "
           "4294967294 and one account, all at once", "keeps every guarantee (AMQP 1.0 2.3.2, 2.5.1, 2.5.6, 2.6.2, "
           "2.6.7, 2.6.14, 2.8.7, 5.3.3.1)", RouterEveryChoiceOther,
           broker_name="reference-router"),
)}

"""Transaction steps for the scripted peer (AMQP 1.0 section 4): a coordinator link, declare, discharge,
transactional transfers and transactional dispositions.

Control messages and transactional states are built with :func:`frames.described` and encoded by proton
(``Delivery.local.data``); nothing here encodes AMQP by hand. Each step returns the evidence (the
broker's disposition frame, or None when none arrived in time): the caller decides what that means.
"""

from __future__ import annotations

import itertools
from typing import Any

from proton import Data, Delivery, Described, Message, Sender, Session, Terminus, symbol

from .amqp_types import BY_NAME
from .frames import Frame, described
from .peer import ScriptedPeer

TRANSACTIONAL_STATE = BY_NAME["transactional-state"].code
LOCAL_TRANSACTIONS = "amqp:local-transactions"
SOURCE_OUTCOMES = ("amqp:accepted:list", "amqp:rejected:list")
_ids = itertools.count(1)


def attach_coordinator(peer: ScriptedPeer, session: Session, name: str | None = None) -> tuple[Sender, Frame]:
    """Attach a sending link whose target is a coordinator (capability ``amqp:local-transactions``) and
    whose source supports the accepted and rejected outcomes (the answers 4.3 allows a discharge), and wait
    for the broker's attach; returns the link and that attach (its target is null when refused)."""
    sender = session.sender(name or f"coordinator-{next(_ids)}")
    sender.source.address = None
    outcomes = sender.source.outcomes  # 4.3: a coordinator conveys a transaction-error in rejected when the
    outcomes.put_array(False, Data.SYMBOL)  # source supports it, so the source says it does
    outcomes.enter()
    for outcome in SOURCE_OUTCOMES:
        outcomes.put_symbol(outcome)
    outcomes.exit()
    sender.target.type = Terminus.COORDINATOR
    capabilities = sender.target.capabilities
    capabilities.put_array(False, Data.SYMBOL)
    capabilities.enter()
    capabilities.put_symbol(LOCAL_TRANSACTIONS)
    capabilities.exit()
    since = peer.mark()
    sender.open()
    return sender, peer.expect("attach", since, name=sender.name)


def _control(peer: ScriptedPeer, coordinator: Sender, body: Any, timeout: float) -> Frame | None:
    since = peer.mark()
    _, transfer = peer.send(coordinator, None, message=Message(body=body), tag=f"ctl{next(_ids)}".encode())
    return peer.wait_for_disposition(transfer.fields["delivery-id"], since, timeout, role="receiver")


def control_body(type_name: str, *, symbolic: bool = False, **fields: Any) -> Described:
    """A described value of a part 4 type (``declare``, ``discharge``, an outcome), with its numeric
    descriptor (ulong code) or, when ``symbolic``, its symbolic one (``amqp:declare:list``): AMQP 1.0 1.5
    makes the two interchangeable."""
    value = described(type_name, **fields)
    return Described(symbol(BY_NAME[type_name].symbol), value.value) if symbolic else value


def declare(peer: ScriptedPeer, coordinator: Sender, timeout: float, *,
            symbolic: bool = False) -> tuple[Any, Frame | None]:
    """Send ``declare`` (with its symbolic descriptor when ``symbolic``); returns the txn-id from the broker's
    ``declared`` state (None if it gave none) and the broker's disposition frame (None if none arrived within
    ``timeout``). The txn-id is bytes when the broker sent a binary (as 4.5.6 types it); any other type is
    returned as decoded, for the case to judge."""
    frame = _control(peer, coordinator, control_body("declare", symbolic=symbolic), timeout)
    state = (frame.fields.get("state") or {}) if frame is not None else {}
    txn_id = state.get("txn-id") if state.get("@type") == "declared" else None
    return (bytes(txn_id) if isinstance(txn_id, (bytes, bytearray)) else txn_id), frame


def discharge(peer: ScriptedPeer, coordinator: Sender, txn_id: bytes, fail: bool | None,
              timeout: float, *, symbolic: bool = False) -> Frame | None:
    """Send ``discharge`` (``fail=True`` rolls back; ``fail=None`` leaves the field out, which AMQP 1.0
    4.5.3 reads as not set: a commit; the symbolic descriptor when ``symbolic``); returns the broker's
    disposition frame or None."""
    body = control_body("discharge", symbolic=symbolic, txn_id=txn_id, fail=fail)
    return _control(peer, coordinator, body, timeout)


def send_transactional(peer: ScriptedPeer, sender: Sender, body: Any, txn_id: bytes | None, *, settled: bool = False,
                       tag: bytes | None = None, message: Message | None = None) -> tuple[Delivery, Frame]:
    """Send one whole message (``message``, else one with ``body``) whose transfer carries
    ``transactional-state`` with ``txn_id``; returns the delivery and its transfer frame."""
    return peer.send(sender, body, tag=tag or f"tx{next(_ids)}".encode(), settled=settled, message=message,
                     state=(TRANSACTIONAL_STATE, [txn_id]))


def dispose_transactional(peer: ScriptedPeer, delivery: Delivery, txn_id: bytes | None, outcome: str = "accepted",
                          *, settle: bool = False, symbolic: bool = False) -> Frame:
    """Dispose of a received delivery with ``transactional-state`` (``txn_id``, ``outcome``, the outcome
    with its symbolic descriptor when ``symbolic``) and return the disposition frame our peer sent; raises
    :class:`.peer.SettledByBroker` when the broker settled the delivery already."""
    if delivery.settled:  # the broker settled it (proton: settled by the remote): no disposition is written for it
        from .peer import settled_by_broker

        raise settled_by_broker(delivery, "its transactional disposition")
    since = peer.mark()
    delivery.local.data = [txn_id, control_body(outcome, symbolic=symbolic)]
    delivery.update(TRANSACTIONAL_STATE)
    if settle:
        delivery.settle()
    peer.pump(lambda: peer.find("disposition", since, direction="out") is not None, timeout=peer.timeout)
    frame = peer.find("disposition", since, direction="out")
    if frame is None:
        from .peer import PeerError

        raise PeerError("proton sent no disposition for the transactional state")
    return frame

"""Transaction steps for the scripted peer (AMQP 1.0 section 4): a coordinator link, declare, discharge,
transactional transfers and transactional dispositions.

Control messages and transactional states are built with :func:`frames.described` and encoded by proton
(``Delivery.local.data``); nothing here encodes AMQP by hand. Each step returns the evidence (the
broker's disposition frame, or None when none arrived in time): the caller decides what that means.
"""

from __future__ import annotations

import itertools
from typing import Any

from proton import Data, Delivery, Message, Sender, Session, Terminus

from .frames import Frame, described
from .peer import ScriptedPeer

TRANSACTIONAL_STATE = 0x34
LOCAL_TRANSACTIONS = "amqp:local-transactions"
_ids = itertools.count(1)


def attach_coordinator(peer: ScriptedPeer, session: Session, name: str | None = None) -> tuple[Sender, Frame]:
    """Attach a sending link whose target is a coordinator (capability ``amqp:local-transactions``) and
    wait for the broker's attach; returns the link and that attach (its target is null when refused)."""
    sender = session.sender(name or f"coordinator-{next(_ids)}")
    sender.source.address = None
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


def declare(peer: ScriptedPeer, coordinator: Sender, timeout: float) -> tuple[bytes | None, Frame | None]:
    """Send ``declare``; returns the txn-id from the broker's ``declared`` state (None if it gave none) and
    the broker's disposition frame (None if none arrived within ``timeout``)."""
    frame = _control(peer, coordinator, described("declare"), timeout)
    state = (frame.fields.get("state") or {}) if frame is not None else {}
    txn_id = state.get("txn-id") if state.get("@type") == "declared" else None
    return (bytes(txn_id) if txn_id is not None else None), frame


def discharge(peer: ScriptedPeer, coordinator: Sender, txn_id: bytes, fail: bool, timeout: float) -> Frame | None:
    """Send ``discharge`` (``fail=True`` rolls back); returns the broker's disposition frame or None."""
    return _control(peer, coordinator, described("discharge", txn_id=txn_id, fail=fail), timeout)


def send_transactional(peer: ScriptedPeer, sender: Sender, body: Any, txn_id: bytes, *, settled: bool = False,
                       tag: bytes | None = None) -> tuple[Delivery, Frame]:
    """Send one whole message whose transfer carries ``transactional-state`` with ``txn_id``; returns the
    delivery and its transfer frame."""
    return peer.send(sender, body, tag=tag or f"tx{next(_ids)}".encode(), settled=settled,
                     state=(TRANSACTIONAL_STATE, [txn_id]))


def dispose_transactional(peer: ScriptedPeer, delivery: Delivery, txn_id: bytes, outcome: str = "accepted",
                          *, settle: bool = False) -> Frame:
    """Dispose of a received delivery with ``transactional-state`` (``txn_id``, ``outcome``) and return
    the disposition frame our peer sent."""
    since = peer.mark()
    delivery.local.data = [txn_id, described(outcome)]
    delivery.update(TRANSACTIONAL_STATE)
    if settle:
        delivery.settle()
    peer.pump(lambda: peer.find("disposition", since, direction="out") is not None, timeout=peer.timeout)
    frame = peer.find("disposition", since, direction="out")
    if frame is None:
        from .peer import PeerError

        raise PeerError("proton sent no disposition for the transactional state")
    return frame

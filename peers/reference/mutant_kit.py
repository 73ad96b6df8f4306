"""What the hand-written mutants are built from: the :class:`Mutant` record, a broker whose frames are
rewritten on their way to the socket (its engine, and so its state, untouched), and a broker that puts a
settled message back later (:class:`PutsBackLater`).

The mutants themselves live in ``mutants.py`` (the registry, :data:`~.mutants.MUTANTS`) and the modules it
gathers (``mutants_core``, ``mutants_umrouter``, ``mutants_errorswire``, ``mutants_sasl``, ``router_mutants``);
they all build on this module, which imports none of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Data, Delivery, Described

from ..engine import delivery_tag
from ..frames import Frame, FrameSplitter, encode_frame
from .broker import Broker, BrokerConnection, Outstanding
from .store import StoredMessage, Subscription


@dataclass(frozen=True)
class Mutant:
    """A named broker variant, the guarantee it breaks and where that guarantee is written."""

    name: str
    description: str
    breaks: str
    broker: type[Broker]
    broker_name: str = "reference"  # the registered broker this mutant replaces (a router mode names its own)
    # the tables (id prefixes) that check the guarantee it breaks: `selftest` runs the mutant against those
    # only, so the self-test costs a family's cases per mutant, not the whole catalogue's; () = every table
    scope: tuple[str, ...] = ()
    # a conformant variant that writes frames the reference does not (fields it leaves out): judged by its base
    # broker's profile without exact-encoding, so the rows' bytes of those frames are informational for it
    encodes_otherwise: bool = False


class RewritingConnection(BrokerConnection):
    """A connection whose outgoing AMQP frames pass through ``rewrite`` before they reach the socket.

    The broker's own engine (and so its state) is untouched: only the bytes the client sees change.
    """

    def __init__(self, broker: Broker, peer_name: str, rewrite: Callable[[Frame], bytes]) -> None:
        super().__init__(broker, peer_name)
        self._rewrite = rewrite
        self._splitter = FrameSplitter("out")

    def data_to_send(self) -> bytes:
        """The bytes the broker's engine has to send, each whole frame in them rewritten."""
        data = super().data_to_send()
        if not data:
            return data
        return b"".join(self._rewrite(frame) for frame in self._splitter.feed(data))


class RewritingBroker(Broker):
    """Base of the mutants that change frames on the wire; subclasses implement :meth:`rewrite`."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose outgoing frames go through :meth:`rewrite`."""
        return RewritingConnection(self, peer_name, self.rewrite)

    def rewrite(self, frame: Frame) -> bytes:
        """The bytes to send in place of ``frame`` (its own bytes by default)."""
        return frame.raw


def outstanding_of(connection: BrokerConnection, delivery: Delivery) -> Outstanding | None:
    """The consumer's record of ``delivery`` (the reference's ``Outstanding``), or None when the link is no consumer
    of this connection or the delivery is no longer outstanding."""
    consumer = connection.consumers.get(delivery.link.name)
    return consumer.outstanding.get(delivery_tag(delivery)) if consumer else None


def split_due(late: list[Any]) -> tuple[list[Any], list[Any]]:
    """The entries of ``late`` (tuples led by the ``time.monotonic()`` they are due at) due now, and the others."""
    now = time.monotonic()
    return [entry for entry in late if entry[0] <= now], [entry for entry in late if entry[0] > now]


class PutsBackLater(Broker):
    """Base of the mutants whose settled message comes back: each answers a consumer's disposition as the
    reference does, then puts the message back on its subscription :attr:`LATE_S` later when :meth:`puts_back`
    says so (or when a subclass calls :meth:`put_back_later`), so that its redelivery is an effect that comes late.
    """

    LATE_S = 0.25

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._late: list[tuple[float, Subscription, StoredMessage]] = []

    def puts_back(self, outstanding: Outstanding, delivery: Delivery) -> bool:
        """Whether the consumer's disposition of ``delivery`` (already answered) sends its message back later;
        never, unless a subclass says otherwise."""
        return False

    def put_back_later(self, outstanding: Outstanding) -> None:
        """Put ``outstanding``'s message back on its subscription :attr:`LATE_S` from now."""
        self._late.append((time.monotonic() + self.LATE_S, outstanding.subscription, outstanding.message))

    def _on_consumer_disposition(self, connection: BrokerConnection, delivery: Delivery) -> None:
        outstanding = outstanding_of(connection, delivery)
        super()._on_consumer_disposition(connection, delivery)
        if outstanding is not None and self.puts_back(outstanding, delivery):
            self.put_back_later(outstanding)

    def dispatch(self) -> None:
        """Put back the messages whose time has come, then dispatch as the reference does."""
        due, self._late = split_due(self._late)
        for _, subscription, message in due:
            subscription.pending.append(message)
        super().dispatch()


def performative_and_payload(frame: Frame) -> tuple[Described, bytes]:
    """The frame's performative as proton decodes it, and the bytes after it (the payload)."""
    body = frame.raw[frame.raw[4] * 4:]
    data = Data()
    consumed = data.decode(body)
    data.rewind()
    data.next()
    return data.get_object(), body[consumed:]


def reframed(frame: Frame, performative: Described | bytes, payload: bytes = b"") -> bytes:
    """``performative`` (and ``payload``) framed as ``frame`` was: its channel and frame type."""
    return encode_frame(performative, channel=frame.channel, frame_type=frame.frame_type, payload=payload)


def with_field(frame: Frame, index: int, value: object) -> bytes:
    """The frame re-encoded by proton with field ``index`` of its performative list set to ``value``."""
    performative, payload = performative_and_payload(frame)
    values = list(performative.value)
    values += [None] * (index + 1 - len(values))
    values[index] = value
    return reframed(frame, Described(performative.descriptor, values), payload)


DISPOSITION_SETTLED = 3  # field index of disposition.settled
DISPOSITION_STATE = 4
FLOW_DRAIN = 8  # field index of flow.drain

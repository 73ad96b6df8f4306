"""A conformant variant whose sequence numbers start near the top of their range, so they wrap within a case.

The broker chooses how it numbers what it sends: its sessions' next-outgoing-id, which its begin states and
its transfers' delivery-ids follow (AMQP 1.0 2.5.6, 2.6.12, 2.7.2), and its sending links'
initial-delivery-count, which its attach states and its flows' delivery-count follows (2.6.7, 2.7.3). Both are
sequence numbers (2.8.7, RFC 1982 serial arithmetic): they go on from 4294967295 to 0. proton starts both at 0
and takes no other start, so the variant shifts them on the wire. Every number the broker writes that counts
its own transfers gains an offset (mod 2**32), and every number the client writes about them loses it before
the broker's guard and proton see it. Inside, the broker is the reference, unchanged.

A transfer frame that the shift makes larger than the client's max-frame-size (its delivery-id takes 5 bytes
where proton wrote 1 or 2, and proton had filled the frame to that size) goes on in a further transfer frame
of the same delivery, as 2.6.14 lets a sender split a message anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proton import Data, uint

from ..frames import FRAME_TYPE_AMQP, Frame, FrameSplitter, encode_frame, encode_value
from ..sequence import MODULUS
from .broker import Broker, BrokerConnection
from .mutant_kit import RewritingConnection
from .router import Router

DELIVERY_ID_OFFSET = MODULUS - 2  # a session's third delivery has delivery-id 0
DELIVERY_COUNT_OFFSET = MODULUS - 2  # a link's second delivery brings its delivery-count to 0
NO_LIMIT = 0xFFFFFFFF  # 2.7.1: max-frame-size when the open leaves it out

# field indexes of the performative lists (2.7.1-2.7.6)
OPEN_MAX_FRAME_SIZE = 2
BEGIN_NEXT_OUTGOING_ID = 1
ATTACH_HANDLE, ATTACH_ROLE, ATTACH_INITIAL_DELIVERY_COUNT = 1, 2, 9
FLOW_NEXT_INCOMING_ID, FLOW_NEXT_OUTGOING_ID, FLOW_HANDLE, FLOW_DELIVERY_COUNT = 0, 2, 4, 5
TRANSFER_DELIVERY_ID, TRANSFER_MORE = 1, 5
TRANSFER_CONTINUATION = (0, 1, 4, 5, 7, 9, 10)  # handle, delivery-id, settled, more, state, aborted, batchable
DISPOSITION_ROLE, DISPOSITION_FIRST, DISPOSITION_LAST = 0, 1, 2
RECEIVER, SENDER = True, False  # 2.8.1: role is a boolean, true for the receiver


LIST0, LIST8, LIST32 = 0x45, 0xC0, 0xD0  # AMQP 1.0 1.6.22: the list encodings
NULL = b"\x40"


@dataclass
class Performative:
    """A frame's performative as its bytes: the descriptor's, each field's (each a value proton's codec decodes
    alone), the list encoding it came in, and the payload after it. Changing a field re-encodes that field
    alone with proton's codec; every other byte stays as the broker (or the client) wrote it."""

    descriptor: bytes
    fields: list[bytes]
    form: int
    payload: bytes

    @classmethod
    def of(cls, frame: Frame) -> Performative | None:
        """``frame``'s performative; None when it is not an AMQP frame's described list (a header, an empty frame, a
        raw row's garbage: those pass unchanged)."""
        body = frame.raw[frame.raw[4] * 4:] if frame.frame_type == FRAME_TYPE_AMQP and len(frame.raw) > 8 else b""
        try:
            if not body or body[0] != 0:
                return None
            at = 1 + Data().decode(body[1:])
            form = body[at]
            if form == LIST0:
                return cls(body[:at], [], form, body[at + 1:])
            width = {LIST8: 1, LIST32: 4}[form]
            size = int.from_bytes(body[at + 1:at + 1 + width], "big")
            count = int.from_bytes(body[at + 1 + width:at + 1 + 2 * width], "big")
            end, position, fields = at + 1 + width + size, at + 1 + 2 * width, []
            for _ in range(count):
                length = Data().decode(body[position:end])
                fields.append(body[position:position + length])
                position += length
            return cls(body[:at], fields, form, body[end:])
        except Exception:  # noqa: BLE001  proton's codec refuses what a raw row wrote on purpose
            return None

    def get(self, index: int) -> Any:
        """Field ``index``, decoded (None when absent or null)."""
        if index >= len(self.fields):
            return None
        data = Data()
        data.decode(self.fields[index])
        data.rewind()
        data.next()
        return data.get_object()

    def put(self, index: int, value: Any) -> None:
        """Set field ``index`` to ``value``, encoded by proton's codec (nulls fill any gap)."""
        self.fields += [NULL] * (index + 1 - len(self.fields))
        self.fields[index] = encode_value(value)

    def shift(self, index: int, by: int) -> bool:
        """Add ``by`` (mod 2**32) to the uint at ``index``; False when the field is absent or not a uint (a raw
        row's deliberately wrong frame stays as the row wrote it)."""
        value = self.get(index)
        if not isinstance(value, uint):
            return False
        self.put(index, uint((int(value) + by) % MODULUS))
        return True

    def frame_bytes(self, frame: Frame, payload: bytes | None = None) -> bytes:
        """The frame with this performative (and ``payload``, or its own), on ``frame``'s channel with its data
        offset: the list in its original encoding when it still fits it (list8 up to 255 bytes and fields), else
        list32."""
        content = b"".join(self.fields)
        count = len(self.fields)
        if self.form == LIST0 and not count:
            listed = bytes([LIST0])
        elif self.form != LIST32 and len(content) + 1 <= 0xFF and count <= 0xFF:
            listed = bytes([LIST8, len(content) + 1, count]) + content
        else:
            listed = bytes([LIST32]) + (len(content) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + content
        return encode_frame(self.descriptor + listed, channel=frame.channel, frame_type=frame.frame_type,
                            payload=self.payload if payload is None else payload, doff=frame.raw[4])


class WrappingConnection(RewritingConnection):
    """A connection that shifts the broker's sequence numbers on the way out and the client's answers about
    them on the way in (module docstring). ``keep``, when given, decides first which of the broker's frames
    reach the wire at all (a variant that also hides frames of its own); ``before``, when given, gives the bytes
    to write ahead of each frame kept (a variant that also writes frames of its own, such as empty ones)."""

    def __init__(self, broker: Broker, peer_name: str, keep: Callable[[Frame], bool] | None = None,
                 before: Callable[[Frame], bytes] | None = None) -> None:
        self._keep, self._before = keep, before
        self._broker_roles: dict[tuple[int, int], bool] = {}  # (channel, handle) of the broker's links -> role
        self._client_roles: dict[tuple[int, int], bool] = {}  # (channel, handle) of the client's links -> role
        self._client_max_frame_size = NO_LIMIT
        super().__init__(broker, peer_name, self._outbound)

    def inbound(self, frame: Frame) -> Frame:
        """The client's frame with its numbers about the broker's transfers shifted back."""
        performative = Performative.of(frame)
        if performative is None:
            return frame
        changed = False
        if frame.performative == "open":
            limit = performative.get(OPEN_MAX_FRAME_SIZE)
            self._client_max_frame_size = int(limit) if isinstance(limit, int) else NO_LIMIT
        elif frame.performative == "attach":
            _note_role(self._client_roles, frame.channel, performative)
        elif frame.performative == "flow":
            changed = performative.shift(FLOW_NEXT_INCOMING_ID, -DELIVERY_ID_OFFSET)
            if self._client_roles.get((frame.channel, performative.get(FLOW_HANDLE))) is RECEIVER:
                changed = performative.shift(FLOW_DELIVERY_COUNT, -DELIVERY_COUNT_OFFSET) or changed
        elif frame.performative == "disposition" and performative.get(DISPOSITION_ROLE) is RECEIVER:
            changed = performative.shift(DISPOSITION_FIRST, -DELIVERY_ID_OFFSET)
            changed = performative.shift(DISPOSITION_LAST, -DELIVERY_ID_OFFSET) or changed
        if not changed:
            return frame
        return FrameSplitter("in").feed(performative.frame_bytes(frame), frame.t_ns)[0]

    def _outbound(self, frame: Frame) -> bytes:
        """The broker's frame with its numbers shifted (a transfer split where it would exceed the client's
        max-frame-size), after what ``before`` writes ahead of it; nothing for a frame not kept."""
        if self._keep is not None and not self._keep(frame):
            return b""
        shifted = self._shifted(frame)
        return (self._before(frame) if self._before is not None else b"") + shifted

    def _shifted(self, frame: Frame) -> bytes:
        """The broker's frame with its numbers shifted (a transfer split where it would exceed the client's
        max-frame-size)."""
        performative = Performative.of(frame)
        if performative is None:
            return frame.raw
        name, changed = frame.performative, False
        if name == "begin":
            changed = performative.shift(BEGIN_NEXT_OUTGOING_ID, DELIVERY_ID_OFFSET)
        elif name == "attach":
            if _note_role(self._broker_roles, frame.channel, performative) is SENDER:
                changed = performative.shift(ATTACH_INITIAL_DELIVERY_COUNT, DELIVERY_COUNT_OFFSET)
        elif name == "flow":
            changed = performative.shift(FLOW_NEXT_OUTGOING_ID, DELIVERY_ID_OFFSET)
            if self._broker_roles.get((frame.channel, performative.get(FLOW_HANDLE))) is SENDER:
                changed = performative.shift(FLOW_DELIVERY_COUNT, DELIVERY_COUNT_OFFSET) or changed
        elif name == "transfer":
            if performative.shift(TRANSFER_DELIVERY_ID, DELIVERY_ID_OFFSET):
                return self._fitted(frame, performative)
        elif name == "disposition" and performative.get(DISPOSITION_ROLE) is SENDER:
            changed = performative.shift(DISPOSITION_FIRST, DELIVERY_ID_OFFSET)
            changed = performative.shift(DISPOSITION_LAST, DELIVERY_ID_OFFSET) or changed
        return performative.frame_bytes(frame) if changed else frame.raw

    def _fitted(self, frame: Frame, transfer: Performative) -> bytes:
        """The transfer's bytes: one frame, or several of the same delivery when one would exceed the client's
        max-frame-size (``more`` on all but the last, which keeps the original's ``more``)."""
        whole = transfer.frame_bytes(frame)
        if len(whole) <= self._client_max_frame_size:
            return whole
        first = replace(transfer, fields=list(transfer.fields))
        first.put(TRANSFER_MORE, True)
        room = self._client_max_frame_size - len(first.frame_bytes(frame, b""))
        rest = replace(transfer, fields=[field if index in TRANSFER_CONTINUATION else NULL
                                         for index, field in enumerate(transfer.fields)],
                       payload=transfer.payload[room:])
        return first.frame_bytes(frame, transfer.payload[:room]) + self._fitted(frame, rest)


def _note_role(roles: dict[tuple[int, int], bool], channel: int, attach: Performative) -> bool | None:
    """Record the role of the link an attach's handle names; return it."""
    handle, role = attach.get(ATTACH_HANDLE), attach.get(ATTACH_ROLE)
    if isinstance(handle, int) and isinstance(role, bool):
        roles[(channel, int(handle))] = role
        return role
    return None


class CountsNearWrap(Broker):
    """Numbers its sessions' transfers and its sending links' deliveries from 4294967294: both wrap to 0 within
    a case (module docstring)."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection that shifts the sequence numbers both ways."""
        return WrappingConnection(self, peer_name)


class RouterCountsNearWrap(CountsNearWrap, Router):
    """The router mode of :class:`CountsNearWrap`."""

"""AMQP 1.0 framing, sans-I/O: split a byte stream into frames and decode each with ``proton.Data``.

The splitter never touches a socket. Feed it bytes as they arrive with :meth:`FrameSplitter.feed`; it
returns every frame (or protocol header) completed so far and keeps the rest for the next call.
Performatives are decoded by python-qpid-proton's codec and given their specification field names
from :mod:`amqp_types`; nothing here encodes or decodes an AMQP type by hand.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from proton import Array, Data, Described, ulong

from .amqp_types import BY_NAME, CHOICE_FIELDS, type_of

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
HEADER_NAMES = {AMQP_HEADER: "amqp-header", SASL_HEADER: "sasl-header", TLS_HEADER: "tls-header"}
FRAME_TYPE_AMQP = 0
FRAME_TYPE_SASL = 1
MIN_FRAME_SIZE = 8
# A frame larger than this is treated as a protocol violation by the splitter, whatever was negotiated:
# it bounds the memory a hostile peer can make us buffer.
DEFAULT_SIZE_LIMIT = 16 * 1024 * 1024


class FramingError(Exception):
    """The byte stream is not AMQP framing. ``offending`` holds the bytes that broke it."""

    def __init__(self, message: str, offending: bytes) -> None:
        super().__init__(f"{message} (offending bytes: {offending[:64].hex()})")
        self.message = message
        self.offending = offending


@dataclass(frozen=True)
class Frame:
    """One captured frame or protocol header.

    ``performative`` is the specification name ("open", "disposition", "sasl-init"), "empty" for a
    heartbeat frame, a header name ("amqp-header", "sasl-header") for a protocol header, or
    "undecodable" when the body is not a described list. ``fields`` maps field names to decoded values
    (see :func:`normalize`). ``raw`` is the whole frame as it crossed the wire.
    """

    direction: str  # "in" or "out", as seen by the endpoint that captured it
    channel: int
    frame_type: int
    performative: str
    fields: dict[str, Any]
    payload: bytes
    raw: bytes
    t_ns: int = field(default_factory=time.monotonic_ns)
    # the body's value as proton.Data decoded it, each AMQP type its Python class (uint, symbol, Array, Described):
    # kept by a splitter made with keep_decoded=True from its one decode (peers/wire_types.py reads the types from
    # it); None when not kept
    decoded: Any = field(default=None, compare=False, repr=False)

    @property
    def payload_len(self) -> int:
        """Length of the bytes after the performative (a transfer's message section bytes)."""
        return len(self.payload)

    def describe(self) -> str:
        """A one-line readable rendering: direction, channel, performative and its non-null fields."""
        arrow = "->" if self.direction == "out" else "<-"
        shown = {k: v for k, v in self.fields.items() if v is not None}
        extra = f" +{self.payload_len}B payload" if self.payload else ""
        return f"{arrow} [{self.channel}] {self.performative} {render(shown)}{extra}"


def normalize(value: Any, owner: str | None = None, field_name: str | None = None) -> Any:
    """Turn a value decoded by ``proton.Data`` into plain, named Python data.

    Described values whose descriptor is known become dicts ``{"@type": name, field: value, ...}``
    (every field up to the encoded list's length; missing trailing fields are absent). Restricted-type
    choices (role, settle modes, terminus durability) become their names. Scalars keep their AMQP type
    (a symbol stays ``proton.symbol``, a uint ``proton.uint``: subclasses of ``str`` and ``int``, see
    :func:`_plain_scalar`); binary becomes ``bytes``; unknown descriptors stay as
    ``{"@descriptor": ..., "@value": ...}``.
    """
    if isinstance(value, Described):
        descriptor = value.descriptor
        known = type_of(descriptor)
        if known is not None and isinstance(value.value, list):
            out: dict[str, Any] = {"@type": known.name}
            for name, item in zip(known.fields, value.value, strict=False):
                out[name] = normalize(item, known.name, name)
            return out
        return {"@descriptor": _plain_scalar(descriptor), "@value": normalize(value.value)}
    if isinstance(value, Array):
        return [normalize(v) for v in value.elements]
    if isinstance(value, dict):
        return {normalize(k): normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if owner is not None and field_name is not None and (owner, field_name) in CHOICE_FIELDS:
        choices = CHOICE_FIELDS[(owner, field_name)]
        key = bool(value) if isinstance(value, bool) else value
        if key in choices:
            return choices[key]
    return _plain_scalar(value)


def _plain_scalar(value: Any) -> Any:
    """A decoded scalar as plain Python data that keeps its AMQP type: proton's typed scalars (``symbol``,
    ``char``, ``uint``, ``ulong``, ``ubyte``, ``ushort``, ``byte``, ``short``, ``int32``, ``timestamp``,
    ``float32``, the decimals) subclass ``str``, ``int`` or ``float``, so they compare equal to plain values
    and serialise as JSON, while a pattern can still require the type (:mod:`.matching`'s ``@symbol`` and
    friends). Binary becomes ``bytes``."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def decode_body(body: bytes) -> tuple[str, dict[str, Any], bytes]:
    """Decode a frame body into (performative name, named fields, payload).

    An empty body is a heartbeat ("empty"). A body that ``proton.Data`` cannot decode, or that is not a
    described list, yields ("undecodable", {"error": ...}, body) rather than raising: a hostile or broken
    peer's frame is evidence to show, not a crash.
    """
    name, fields, payload, _ = decode_body_kept(body)
    return name, fields, payload


def decode_body_kept(body: bytes) -> tuple[str, dict[str, Any], bytes, Any]:
    """:func:`decode_body` plus the value ``proton.Data`` decoded, as it decoded it (each AMQP type its Python
    class: ``uint``, ``symbol``, ``Array``, ``Described``), from the same decode; None when the body is empty or
    does not decode."""
    if not body:
        return "empty", {}, b"", None
    data = Data()
    try:
        consumed = data.decode(body)
        data.rewind()
        data.next()
        obj = data.get_object()
    except Exception as exc:  # proton raises DataException and friends on bad input
        return "undecodable", {"error": f"{type(exc).__name__}: {exc}"}, body, None
    named = normalize(obj)
    if not isinstance(named, dict) or "@type" not in named:
        return "undecodable", {"error": "frame body is not a known described list", "value": named}, body, obj
    name = named.pop("@type")
    return name, named, body[consumed:], obj


class FrameSplitter:
    """Splits one direction of an AMQP connection's byte stream into :class:`Frame` objects.

    Call :meth:`feed` with each chunk as it arrives; it returns the frames completed by that chunk.
    Protocol headers (``AMQP`` + id + version) are recognised wherever a frame could start, so the SASL
    header, the SASL frames and the AMQP header that follows them split correctly. A frame whose size
    field is below 8 or above ``size_limit`` raises :class:`FramingError`; after that the splitter is
    stuck and every later call raises again (the stream has lost its framing for good).
    With ``keep_decoded=True`` each frame also carries :attr:`Frame.decoded`, the value of the same decode.
    """

    def __init__(self, direction: str, size_limit: int = DEFAULT_SIZE_LIMIT, keep_decoded: bool = False) -> None:
        self.direction = direction
        self.size_limit = size_limit
        self.keep_decoded = keep_decoded
        self._buffer = bytearray()
        self._broken: FramingError | None = None
        self._t_ns = 0  # when the last chunk arrived: the time of every frame it completes

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed(self, chunk: bytes, t_ns: int | None = None) -> list[Frame]:
        """Add bytes from the stream; return the frames they complete, in order.

        ``t_ns`` (``time.monotonic_ns`` clock): when ``chunk`` arrived; every frame it completes is stamped
        with it (a frame's time is the arrival of its last byte), or with the previous chunk's time where that is
        later: a stream's frames are stamped in the order they came. None: now.
        """
        return list(self.split(chunk, t_ns))

    def split(self, chunk: bytes, t_ns: int | None = None) -> Iterator[Frame]:
        """Add bytes from the stream (at once); the frames they complete come one at a time, each split and
        decoded only when the iterator is asked for it, so a caller that stops early leaves the rest
        buffered, undecoded, for the next call. Raises :class:`FramingError` as :meth:`feed` does (at once
        when broken already, else when the bad frame is reached). ``t_ns``: as for :meth:`feed`."""
        if self._broken is not None:
            raise self._broken
        self._buffer += chunk
        # never before the chunk before it: what comes later on one stream cannot have arrived earlier, though two
        # kernel stamps taken microseconds apart may say so once turned to this clock (.recvtime's offset error)
        self._t_ns = max(self._t_ns, time.monotonic_ns() if t_ns is None else t_ns)
        return self._frames()

    def _frames(self) -> Iterator[Frame]:
        while True:
            frame = self._next_frame()
            if frame is None:
                return
            yield frame

    def _next_frame(self) -> Frame | None:
        buf = self._buffer
        if len(buf) >= 4 and buf[:4] == b"AMQP":
            if len(buf) < 8:
                return None
            raw = bytes(buf[:8])
            del buf[:8]
            name = HEADER_NAMES.get(raw, "unknown-header")
            return Frame(self.direction, 0, -1, name, {"protocol-id": raw[4], "version": list(raw[5:8])}, b"", raw,
                         t_ns=self._t_ns)
        if len(buf) < 8:
            return None
        size, doff, frame_type, channel = struct.unpack(">IBBH", bytes(buf[:8]))
        if size < MIN_FRAME_SIZE or size > self.size_limit or doff < 2 or doff * 4 > size:
            self._broken = FramingError(
                f"invalid frame header: size={size} doff={doff} type={frame_type}", bytes(buf[:64])
            )
            raise self._broken
        if len(buf) < size:
            return None
        raw = bytes(buf[:size])
        del buf[:size]
        if self.keep_decoded:
            name, fields, payload, decoded = decode_body_kept(raw[doff * 4:])
            return Frame(self.direction, channel, frame_type, name, fields, payload, raw, t_ns=self._t_ns,
                         decoded=decoded)
        name, fields, payload = decode_body(raw[doff * 4:])
        return Frame(self.direction, channel, frame_type, name, fields, payload, raw, t_ns=self._t_ns)


def redact_frame(frame: Frame) -> Frame:
    """The frame with any SASL PLAIN password masked (same length, ``*``), in fields and raw bytes alike.

    Applied at capture time, so no log, record or report made from captured frames can hold a password.
    """
    if frame.performative != "sasl-init":
        return frame
    response = frame.fields.get("initial-response")
    if not isinstance(response, bytes) or response.count(b"\x00") < 2:
        return frame
    authzid, authcid, password = response.split(b"\x00", 2)
    if not password:
        return frame
    masked = b"\x00".join((authzid, authcid, b"*" * len(password)))
    fields = dict(frame.fields, **{"initial-response": masked})
    return replace(frame, fields=fields, raw=frame.raw.replace(response, masked))


def encode_value(value: Any) -> bytes:
    """Encode one Python/proton value with ``proton.Data`` (its choice of widths)."""
    data = Data()
    data.put_object(value)
    return data.encode()


def described(type_name: str, /, **fields: Any) -> Described:
    """Build a ``proton.Described`` of a known type from field names, e.g. described("detach", handle=0).

    Fields use the specification's names with ``_`` for ``-``; unknown names raise ``KeyError`` that lists
    the valid ones. Trailing absent fields are omitted from the list, as the specification allows.
    """
    spec = BY_NAME[type_name]
    given = {k.replace("_", "-"): v for k, v in fields.items()}
    unknown = set(given) - set(spec.fields)
    if unknown:
        raise KeyError(f"{type_name} has no field(s) {sorted(unknown)}; fields: {list(spec.fields)}")
    values = [given.get(f) for f in spec.fields]
    while values and values[-1] is None:
        values.pop()
    return Described(ulong(spec.code), values)


def encode_frame(body: bytes | Described | Any, channel: int = 0, frame_type: int = FRAME_TYPE_AMQP,
                 payload: bytes = b"", doff: int = 2, size: int | None = None) -> bytes:
    """Build frame bytes: 8-byte header, then ``body`` (encoded with proton.Data unless already bytes).

    ``size`` and ``doff`` can be set to wrong values on purpose, for negative cases; by default they are
    computed so the frame is well-formed.
    """
    encoded = body if isinstance(body, (bytes, bytearray)) else encode_value(body)
    extended = b"\x00" * max(0, doff * 4 - 8)
    total = 8 + len(extended) + len(encoded) + len(payload)
    return struct.pack(">IBBH", total if size is None else size, doff, frame_type, channel) + extended + bytes(
        encoded) + payload


def to_jsonable(value: Any) -> Any:
    """Render decoded frame data for JSON: bytes as ``"b'...'"`` (Python bytes notation), keys as str."""
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value))
    if isinstance(value, dict):
        return {str(to_jsonable(k)) if not isinstance(k, str) else k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def render(value: Any) -> str:
    """Compact readable text for decoded data: ``{settled=True state=accepted}``."""
    if isinstance(value, dict):
        if isinstance(value.get("@type"), str):  # a pattern's "@type" may be an operator: rendered as a dict
            inner = {k: v for k, v in value.items() if k != "@type" and v is not None}
            return value["@type"] + (render(inner) if inner else "")
        return "{" + " ".join(f"{k}={render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value))
    return str(value)


def first_frame(frames: Iterable[Frame], performative: str, direction: str | None = None) -> Frame | None:
    """The first of ``frames`` with this ``performative`` (and, when given, this ``direction``: ``"in"`` from the
    broker, ``"out"`` from us), in the order given; None when there is none. A connection's ``open`` or ``close``
    each way, say: the one look-up every check of who closed first or when the broker closed shares."""
    return next((f for f in frames if f.performative == performative
                 and (direction is None or f.direction == direction)), None)


def labelled_lines(frames: list[tuple[str, Frame]]) -> list[str]:
    """A case's frame log (``(party, Frame)`` pairs) as ``[party]`` lines of :func:`frames_text`, one a frame."""
    text = frames_text(frame for _, frame in frames).splitlines()
    return [f"[{party}] {line}" for (party, _), line in zip(frames, text, strict=False)]


def frames_text(frames: Iterable[Frame]) -> str:
    """The frame log as text, one frame a line, time relative to the first frame in milliseconds."""
    lines = []
    start: int | None = None
    for frame in frames:
        start = frame.t_ns if start is None else start
        lines.append(f"{(frame.t_ns - start) / 1e6:9.3f}ms {frame.describe()}")
    return "\n".join(lines)

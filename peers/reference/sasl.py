"""The reference broker's SASL server layer (5.3), sans-I/O, in front of proton's transport.

proton-C's built-in SASL server cannot check a PLAIN password, so the broker answers the SASL exchange
itself, with frames encoded by ``proton.Data``, and hands proton the bytes that follow a successful
outcome (the AMQP protocol header onwards).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proton import UNDESCRIBED, Array, Data, symbol, ubyte

from ..frames import (
    AMQP_HEADER,
    FRAME_TYPE_SASL,
    SASL_HEADER,
    Frame,
    FrameSplitter,
    FramingError,
    described,
    encode_frame,
)

SASL_OK = ubyte(0)  # sasl-outcome's code is a ubyte (SASL 5.3.3.6); a bare int would encode as a long
SASL_AUTH = ubyte(1)


@dataclass
class SaslResult:
    """What one call to :meth:`SaslServer.receive_data` produced."""

    to_send: bytes = b""
    frames_in: list[Frame] = field(default_factory=list)
    frames_out: list[Frame] = field(default_factory=list)
    passthrough: bytes = b""  # bytes after the SASL layer, for proton (only once ``done``)
    close: bool = False  # the exchange failed: write ``to_send`` then close the socket


class SaslServer:
    """Runs the server side of SASL ANONYMOUS and PLAIN.

    ``users`` maps user names to passwords; when empty, PLAIN accepts any user and ANONYMOUS is offered.
    After :meth:`receive_data` reports ``passthrough`` bytes, the layer is done and every later byte
    should go straight to proton. A client that sends the AMQP header with no SASL is let through only
    when no users are configured.
    """

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.users = dict(users or {})
        self.external_user: str | None = None  # set by the TLS layer from a verified client certificate
        self.done = False
        self.user: str | None = None
        self._header_seen = False
        self._splitter = FrameSplitter("in")
        self._out = FrameSplitter("out")

    @property
    def mechanisms(self) -> list[str]:
        """The mechanisms offered: PLAIN always, ANONYMOUS only when no users are configured, EXTERNAL first
        when TLS verified a client certificate."""
        external = ["EXTERNAL"] if self.external_user else []
        return external + (["PLAIN"] if self.users else ["ANONYMOUS", "PLAIN"])

    def receive_data(self, data: bytes) -> SaslResult:
        """Consume bytes from the client; return what to write, what was captured and what to pass on."""
        result = SaslResult()
        if self.done:
            result.passthrough = data
            return result
        if not self._header_seen and self._splitter.buffered + len(data) >= 8:
            start = (bytes(self._splitter._buffer) + data)[:8]
            if start not in (SASL_HEADER, AMQP_HEADER):
                # 2.2: a protocol header we do not support is answered with one we do, then the socket closes
                self._emit(result, SASL_HEADER)
                result.frames_in.append(Frame("in", 0, -1, "unknown-header", {}, b"", start))
                result.close = True
                return result
        # frames are split one at a time: what follows the exchange stays in the buffer, undecoded, and is
        # passed on as bytes (the broker's policed input then decodes each frame once)
        frames = self._splitter.split(data)
        while True:
            try:
                frame = next(frames, None)
            except FramingError:
                result.close = True
                return result
            if frame is None:
                return result
            result.frames_in.append(frame)
            if frame.performative == "amqp-header":
                if self.users:
                    self._emit(result, SASL_HEADER)
                    result.close = True
                    return result
                self.done = True
                result.passthrough = frame.raw + self._leftover()
                result.frames_in.pop()  # proton's capture records it
                return result
            if frame.performative == "sasl-header":
                self._header_seen = True
                self._emit(result, SASL_HEADER)
                mechanisms = Array(UNDESCRIBED, Data.SYMBOL, *[symbol(m) for m in self.mechanisms])
                self._emit(result, encode_frame(described("sasl-mechanisms", sasl_server_mechanisms=mechanisms),
                                                frame_type=FRAME_TYPE_SASL))
            elif frame.performative == "sasl-init" and self._header_seen:
                ok = self._authenticate(frame)
                self._emit(result, encode_frame(described("sasl-outcome", code=SASL_OK if ok else SASL_AUTH),
                                                frame_type=FRAME_TYPE_SASL))
                if not ok:
                    result.close = True
                    return result
                self.done = True
                result.passthrough = self._leftover()
                return result
            else:
                result.close = True
                return result

    def _leftover(self) -> bytes:
        rest = bytes(self._splitter._buffer)
        self._splitter._buffer.clear()
        return rest

    def _emit(self, result: SaslResult, data: bytes) -> None:
        result.to_send += data
        result.frames_out += self._out.feed(data)

    def _authenticate(self, frame: Frame) -> bool:
        mechanism = frame.fields.get("mechanism")
        if mechanism not in self.mechanisms:
            return False
        if mechanism == "ANONYMOUS":
            self.user = "anonymous"
            return True
        if mechanism == "EXTERNAL":  # the identity is the certificate's; an authzid, if any, must be it
            authzid = (frame.fields.get("initial-response") or b"").decode("utf-8", "replace")
            if authzid and authzid != self.external_user:
                return False
            self.user = self.external_user
            return True
        response = frame.fields.get("initial-response") or b""
        parts = response.split(b"\x00")
        if len(parts) != 3:
            return False
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        if self.users and self.users.get(user) != password:
            return False
        self.user = user
        return True

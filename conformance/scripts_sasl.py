"""The SASL scenario (AMQP 1.0 5.3): authenticate on a raw socket, rightly or wrongly, perhaps with the AMQP protocol
header and open pipelined behind the sasl-init, perhaps with no SASL at all, and observe the broker's outcome and
what follows it.

It also holds the SASL exchange the raw-frame scenario's ``sasl`` set-up runs (:func:`sasl_exchange`).

Observations: ``outcome`` (the sasl-outcome's fields, decoded with their AMQP types: ``code`` is a ubyte,
5.3.3.6), ``header`` (the first protocol header the broker sent after our first write of the exchange, as text),
``sent`` (every frame the broker sent after it, by name, up to the socket's close or a quiet time after the last
one), ``connection`` (``opened``: whether the broker sent an open; ``closed``: whether it sent a close after that
open), ``socket`` (whether the broker closed the TCP connection) and ``negotiation`` (``header``, ``sent`` and
``socket`` together, for a row whose source allows more than one whole answer).
"""

from __future__ import annotations

import secrets
from typing import Any

from amqp_conformance.peers.frames import AMQP_HEADER, FRAME_TYPE_SASL, SASL_HEADER, described, encode_frame
from amqp_conformance.peers.rawpeer import RawSocket
from proton import symbol

from .broker_frames import await_in, first_in, header_text, sent_since
from .context import CaseContext, NotApplicable, SetupFailed, setup_step

CREDENTIALS = {
    "given": "PLAIN with the URL's user and password, else EXTERNAL with its client certificate, else ANONYMOUS",
    "wrong-password": "PLAIN with the URL's user and a password that is not theirs",
    "password-not-utf8": "PLAIN with the URL's user and a password whose bytes are not UTF-8",
    "user-not-utf8": "PLAIN with a user name whose bytes are not UTF-8 (so no account's) and the URL's password",
    "malformed-plain": "PLAIN whose response has no NUL separators (RFC 4616 2: [authzid] NUL authcid NUL passwd)",
    "unoffered-mechanism": "a sasl-init naming a mechanism the broker did not offer",
    "external-other-identity": "EXTERNAL asking to act as an identity no one has, not the certificate's",
    "external-identity-not-utf8": "EXTERNAL asking to act as an identity whose bytes are not UTF-8",
    "open-instead-of-init": "an AMQP open frame where the sasl-init belongs",
    "none": "no SASL: the AMQP protocol header (id 0) first",
}
"""How the row's peer authenticates (the ``credentials`` of a row's ``given``)."""
CHECKED_PASSWORD = ("wrong-password", "password-not-utf8", "user-not-utf8")
"""Credentials only a broker that checks the URL's user's password can be judged by (its admin says so)."""
EXTERNAL_IDENTITY = ("external-other-identity", "external-identity-not-utf8")
"""Credentials that need a client certificate in the URL (--cert) and a broker that offers EXTERNAL."""
REFUSED = (*CHECKED_PASSWORD, *EXTERNAL_IDENTITY, "malformed-plain", "unoffered-mechanism")
"""Credentials the broker must refuse with a sasl-outcome: it may take time on purpose (refused_login_delay)."""
UNOFFERED_MECHANISM = "X-CONFORMANCE-NONE"  # a well-formed SASL mechanism name (RFC 4422 3.1) no broker offers
NOT_UTF8 = b"\xff\xfe"  # bytes that never occur in UTF-8 (RFC 3629 1)
PIPELINE_CONTAINER = "conformance-pipelined-open"


def offered_mechanisms(peer: RawSocket) -> list[str]:
    """Send the SASL protocol header and read the broker's sasl-mechanisms (5.3.2): the mechanisms it offers."""
    since = peer.mark()
    peer.send_raw(SASL_HEADER)
    offered = await_in(peer, since, "sasl-mechanisms", "SASL", "the broker sent no sasl-mechanisms after the SASL "
                       "header").fields.get("sasl-server-mechanisms")
    return [str(m) for m in (offered if isinstance(offered, (list, tuple)) else [offered])]


def sasl_init(ctx: CaseContext, offered: list[str], credentials: str = "given") -> bytes:
    """The frame our peer writes where the sasl-init belongs, for ``credentials`` (see :data:`CREDENTIALS`, all but
    ``none``) among the ``offered`` mechanisms.

    Raises :class:`NotApplicable` when the credentials need PLAIN and the broker offers none, and for
    :data:`CHECKED_PASSWORD` when the broker's admin does not say the broker checks the URL's user's password (a
    broker that takes any password has no wrong one); :class:`SetupFailed` when the broker offers nothing raw mode
    can do with the URL given."""
    address = ctx.address
    if credentials == "unoffered-mechanism":
        if UNOFFERED_MECHANISM in offered:
            raise SetupFailed(f"set-up step 'SASL' failed: the broker offers {UNOFFERED_MECHANISM}, the name this "
                              f"row uses for a mechanism no broker offers")
        return encode_frame(described("sasl-init", mechanism=symbol(UNOFFERED_MECHANISM)), frame_type=FRAME_TYPE_SASL)
    if credentials == "open-instead-of-init":
        return encode_frame(described("open", container_id=PIPELINE_CONTAINER))
    if credentials in CHECKED_PASSWORD:
        if address.user is None or not getattr(ctx.admin, "checks_passwords", False) or "PLAIN" not in offered:
            raise NotApplicable(f"a wrong password needs PLAIN (offered: {offered}), a user in the URL and a broker "
                                f"whose admin says it checks that user's password (for a --url run: "
                                f"checks_passwords = true in the profile's [admin]): a broker that takes any "
                                f"password has no wrong one")
        user, password = address.user.encode(), (address.password or "").encode()
        if credentials == "wrong-password":
            return _plain(user, _not_the_password(address.password).encode())
        if credentials == "password-not-utf8":
            return _plain(user, NOT_UTF8 + password)
        return _plain(NOT_UTF8 + user, password)
    if credentials in EXTERNAL_IDENTITY:
        if not address.tls.cert or "EXTERNAL" not in offered:
            raise NotApplicable(f"an EXTERNAL authorization identity needs a client certificate in the URL (--cert) "
                                f"and a broker that offers EXTERNAL (offered: {offered})")
        nobody = f"conformance-nobody-{secrets.token_hex(6)}".encode()
        return _init("EXTERNAL", nobody if credentials == "external-other-identity" else NOT_UTF8 + nobody)
    if credentials == "malformed-plain":
        if "PLAIN" not in offered:
            raise NotApplicable(f"a malformed PLAIN response needs a broker that offers PLAIN (offered: {offered})")
        return _init("PLAIN", (address.user or "anonymous").encode())
    if address.user is not None and "PLAIN" in offered:
        return _plain(address.user.encode(), (address.password or "").encode())
    if address.tls.cert and "EXTERNAL" in offered:  # as the certificate's identity: an empty authzid (RFC 4422 A.1)
        return _init("EXTERNAL", b"")
    if "ANONYMOUS" in offered:
        return _init("ANONYMOUS")
    raise SetupFailed(f"set-up step 'SASL' failed: the broker offers {offered}; raw mode can do PLAIN (give "
                      f"user:password in the URL), EXTERNAL (give --cert) or ANONYMOUS")


def _init(mechanism: str, response: bytes | None = None) -> bytes:
    fields: dict[str, Any] = {"mechanism": symbol(mechanism)}
    if response is not None:
        fields["initial_response"] = response
    return encode_frame(described("sasl-init", **fields), frame_type=FRAME_TYPE_SASL)


def _plain(user: bytes, password: bytes) -> bytes:
    return _init("PLAIN", b"\0" + user + b"\0" + password)


def _not_the_password(password: str | None) -> str:
    """A password that is certainly not ``password``: a fresh random one, with a character added if it happened
    to be equal."""
    wrong = secrets.token_hex(12)
    return wrong + "x" if wrong == password else wrong


def sasl_exchange(ctx: CaseContext, peer: RawSocket) -> int:
    """Authenticate in raw mode (AMQP 1.0 5.3.2): SASL header, the URL's credentials (``given``, see
    :data:`CREDENTIALS`), outcome ok. The next bytes written are where the AMQP protocol header belongs. Returns
    where what the broker sends once SASL is done begins in the frame log (:func:`after_sasl_outcome`)."""
    init = sasl_init(ctx, offered_mechanisms(peer))
    since = peer.mark()
    peer.send_raw(init)
    code = await_in(peer, since, "sasl-outcome", "SASL", "the broker sent no sasl-outcome").fields.get("code")
    if code != 0:
        raise SetupFailed(f"set-up step 'SASL' failed: sasl-outcome code {code} (authentication refused)")
    return after_sasl_outcome(peer)


def after_sasl_outcome(peer: RawSocket) -> int:
    """The frame-log index just after the broker's sasl-outcome: where what it sends once SASL is done begins
    (its AMQP header, 5.3.2), whether that came in the read that brought the outcome or in a later one."""
    return next(index + 1 for index, frame in enumerate(peer.frames)
                if frame.direction == "in" and frame.performative == "sasl-outcome")


def pipelined_open(ctx: CaseContext) -> bytes:
    """The AMQP protocol header and an open frame (2.4.1, 2.7.1), to be written behind the sasl-init before any
    outcome is read (2.4.2: a peer may pipeline the connection's negotiation)."""
    return AMQP_HEADER + _open(ctx)


def _open(ctx: CaseContext) -> bytes:
    fields: dict[str, Any] = {"container_id": PIPELINE_CONTAINER}
    hostname = ctx.open_hostname()
    if hostname is not None:
        fields["hostname"] = hostname
    return encode_frame(described("open", **fields))


def _connect(ctx: CaseContext) -> RawSocket:
    peer = setup_step("connect", RawSocket, ctx.address, "raw", ctx.timeout)
    ctx.peers.append(peer)
    return peer


def run_sasl(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Authenticate with the row's ``credentials``, the AMQP header and open pipelined behind the sasl-init when
    ``pipeline`` is set, the SASL header in the same write as the sasl-init when ``header_with_init`` is set (the
    mechanisms learnt on a connection before); observe as the module docstring says."""
    credentials = given["credentials"]
    if credentials == "none":
        return _run_without_sasl(ctx, given)
    if given["header_with_init"]:
        probe = _connect(ctx)
        offered = offered_mechanisms(probe)
        probe.close()
        peer = _connect(ctx)
        since = peer.mark()
        init = SASL_HEADER + sasl_init(ctx, offered, credentials)
    else:
        peer = _connect(ctx)
        init = sasl_init(ctx, offered_mechanisms(peer), credentials)
        since = peer.mark()
    peer.send_raw(init + (pipelined_open(ctx) if given["pipeline"] else b""))
    awaited = "open" if given["pipeline"] and credentials == "given" else "sasl-outcome"
    # a broker may take time on purpose around a refused login, before its outcome or before it closes a
    # connection the client has not closed (its profile's refused_login_delay)
    late = ctx.refused_login_delay if credentials in REFUSED else 0.0
    peer.pump(lambda: peer.eof or first_in(peer.frames, since, (awaited,)) is not None, ctx.timeout + late)
    # then up to the socket's close: the quiet time more, or, when the row is about the socket's close, what is
    # left of the time-out (a broker may close it a moment after its last frame) and the delay it declares
    closing = ctx.expected.get("socket") == "closed"
    peer.pump(lambda: peer.eof, ctx.wait_for("socket", "open") + (late if closing else 0.0))
    return _observed(peer, since)


def _run_without_sasl(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """No SASL (2.2): the AMQP protocol header, the open behind it when ``pipeline`` is set (else after the
    broker's header); when the broker opens, our close, to see the connection work past its open (2.4.3)."""
    peer = _connect(ctx)
    since = peer.mark()
    peer.send_raw(AMQP_HEADER + (_open(ctx) if given["pipeline"] else b""))
    if not given["pipeline"]:
        peer.pump(lambda: peer.eof or first_in(peer.frames, since, ("amqp-header", "sasl-header")) is not None)
        if first_in(peer.frames, since, ("amqp-header",)) is not None and not peer.eof:
            peer.send_raw(_open(ctx))
    peer.pump(lambda: peer.eof or first_in(peer.frames, since, ("open",)) is not None)
    opened = first_in(peer.frames, since, ("open",))
    if opened is not None and not peer.eof:
        after = peer.mark()
        peer.send_raw(encode_frame(described("close")))
        peer.pump(lambda: peer.eof or first_in(peer.frames, after, ("close",)) is not None)
    peer.pump(lambda: peer.eof, ctx.wait_for("socket", "open"))
    return _observed(peer, since)


def _observed(peer: RawSocket, since: int) -> dict[str, Any]:
    outcome = first_in(peer.frames, since, ("sasl-outcome",))
    opened = first_in(peer.frames, since, ("open",))
    closed = opened is not None and first_in(peer.frames, peer.frames.index(opened), ("close",)) is not None
    header = header_text(first_in(peer.frames, since, ("amqp-header", "sasl-header", "tls-header", "unknown-header")))
    sent = sent_since(peer, since)
    socket = "closed" if peer.eof else "open"
    return {
        "outcome": dict(outcome.fields) if outcome is not None else None,
        "header": header,
        "sent": sent,
        "connection": {"opened": opened is not None, "closed": closed},
        "socket": socket,
        "negotiation": {"header": header, "sent": sent, "socket": socket},
    }

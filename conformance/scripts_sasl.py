"""The SASL scenario (AMQP 1.0 5.3): authenticate on a raw socket, perhaps with a wrong password, perhaps with the
AMQP protocol header and open pipelined behind the sasl-init, and observe the broker's outcome and what follows it.

It also holds the SASL exchange the raw-frame scenario's ``sasl`` set-up runs (:func:`sasl_exchange`).

Observations: ``outcome`` (the sasl-outcome's fields, decoded with their AMQP types: ``code`` is a ubyte,
5.3.3.6), ``header`` (the protocol header the broker sent after the sasl-init, as text), ``sent`` (every frame the
broker sent after the sasl-init, by name, up to the socket's close or a quiet time after the last one),
``connection`` (``opened``: whether the broker sent an open after the sasl-init; ``closed``: whether it sent a
close after that open) and ``socket`` (whether the broker closed the TCP connection).
"""

from __future__ import annotations

import secrets
from typing import Any

from amqp_conformance.peers.frames import AMQP_HEADER, FRAME_TYPE_SASL, SASL_HEADER, described, encode_frame
from amqp_conformance.peers.rawpeer import RawSocket
from proton import symbol

from .broker_frames import await_in, first_in, header_text, sent_since
from .context import CaseContext, NotApplicable, SetupFailed, setup_step

CREDENTIALS = ("given", "wrong-password")
"""``given``: PLAIN with the URL's user and password, or ANONYMOUS when the URL names no user; ``wrong-password``:
PLAIN with the URL's user and a password that is not theirs (needs a broker whose admin says it checks them)."""
PIPELINE_CONTAINER = "conformance-pipelined-open"


def offered_mechanisms(peer: RawSocket) -> list[str]:
    """Send the SASL protocol header and read the broker's sasl-mechanisms (5.3.2): the mechanisms it offers."""
    since = peer.mark()
    peer.send_raw(SASL_HEADER)
    offered = await_in(peer, since, "sasl-mechanisms", "SASL", "the broker sent no sasl-mechanisms after the SASL "
                       "header").fields.get("sasl-server-mechanisms")
    return [str(m) for m in (offered if isinstance(offered, (list, tuple)) else [offered])]


def sasl_init(ctx: CaseContext, offered: list[str], credentials: str = "given") -> bytes:
    """The sasl-init frame for ``credentials`` (see :data:`CREDENTIALS`) among the ``offered`` mechanisms.

    Raises :class:`NotApplicable` for ``wrong-password`` when the broker's admin does not say the broker checks
    the URL's user's password (a broker that takes any password has no wrong one), or it offers no PLAIN; and
    :class:`SetupFailed` when the broker offers nothing raw mode can do with the URL given."""
    address = ctx.address
    if credentials == "wrong-password":
        if address.user is None or not getattr(ctx.admin, "checks_passwords", False) or "PLAIN" not in offered:
            raise NotApplicable(f"a wrong password needs PLAIN (offered: {offered}), a user in the URL and a broker "
                                f"whose admin says it checks that user's password (for a --url run: "
                                f"checks_passwords = true in the profile's [admin]): a broker that takes any "
                                f"password has no wrong one")
        return _plain(address.user, _not_the_password(address.password))
    if address.user is not None and "PLAIN" in offered:
        return _plain(address.user, address.password or "")
    if "ANONYMOUS" in offered:
        return encode_frame(described("sasl-init", mechanism=symbol("ANONYMOUS")), frame_type=FRAME_TYPE_SASL)
    raise SetupFailed(f"set-up step 'SASL' failed: the broker offers {offered}; raw mode can do PLAIN (give "
                      f"user:password in the URL) or ANONYMOUS")


def _plain(user: str, password: str) -> bytes:
    return encode_frame(described("sasl-init", mechanism=symbol("PLAIN"),
                                  initial_response=f"\0{user}\0{password}".encode()), frame_type=FRAME_TYPE_SASL)


def _not_the_password(password: str | None) -> str:
    """A password that is certainly not ``password``: a fresh random one, with a character added if it happened
    to be equal."""
    wrong = secrets.token_hex(12)
    return wrong + "x" if wrong == password else wrong


def sasl_exchange(ctx: CaseContext, peer: RawSocket) -> None:
    """Authenticate in raw mode (AMQP 1.0 5.3.2): SASL header, PLAIN with the URL's user or else ANONYMOUS,
    outcome ok. The next bytes written are where the AMQP protocol header belongs."""
    init = sasl_init(ctx, offered_mechanisms(peer))
    since = peer.mark()
    peer.send_raw(init)
    code = await_in(peer, since, "sasl-outcome", "SASL", "the broker sent no sasl-outcome").fields.get("code")
    if code != 0:
        raise SetupFailed(f"set-up step 'SASL' failed: sasl-outcome code {code} (authentication refused)")


def pipelined_open(ctx: CaseContext) -> bytes:
    """The AMQP protocol header and an open frame (2.4.1, 2.7.1), to be written behind the sasl-init before any
    outcome is read (2.4.2: a peer may pipeline the connection's negotiation)."""
    fields: dict[str, Any] = {"container_id": PIPELINE_CONTAINER}
    hostname = ctx.open_hostname()
    if hostname is not None:
        fields["hostname"] = hostname
    return AMQP_HEADER + encode_frame(described("open", **fields))


def run_sasl(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Authenticate with the row's ``credentials``, the AMQP header and open pipelined behind the sasl-init when
    ``pipeline`` is set; observe ``outcome``, ``header``, ``sent``, ``connection`` and ``socket`` (module docstring)."""
    peer = setup_step("connect", RawSocket, ctx.address, "raw", ctx.timeout)
    ctx.peers.append(peer)
    init = sasl_init(ctx, offered_mechanisms(peer), given["credentials"])
    since = peer.mark()
    peer.send_raw(init + (pipelined_open(ctx) if given["pipeline"] else b""))
    expected_open = given["pipeline"] and given["credentials"] == "given"
    # a broker may wait on purpose before it answers a refused login (its profile's refused_login_delay)
    wait = ctx.timeout + (ctx.refused_login_delay if given["credentials"] == "wrong-password" else 0.0)
    peer.pump(lambda: peer.eof or (first_in(peer.frames, since, ("open",)) is not None if expected_open
                                   else first_in(peer.frames, since, ("sasl-outcome",)) is not None), wait)
    peer.pump(lambda: peer.eof, ctx.quiet)  # then a quiet time more (or up to the socket's close) for what follows
    outcome = first_in(peer.frames, since, ("sasl-outcome",))
    opened = first_in(peer.frames, since, ("open",))
    closed = opened is not None and first_in(peer.frames, peer.frames.index(opened), ("close",)) is not None
    return {
        "outcome": dict(outcome.fields) if outcome is not None else None,
        "header": header_text(first_in(peer.frames, since, ("amqp-header", "sasl-header", "tls-header",
                                                            "unknown-header"))),
        "sent": sent_since(peer, since),
        "connection": {"opened": opened is not None, "closed": closed},
        "socket": "closed" if peer.eof else "open",
    }

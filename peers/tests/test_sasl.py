"""Tests for amqp_conformance.peers.reference.sasl: the reference broker's SASL server (AMQP 1.0 part 5.3).

Driven in memory: client bytes are built with encode_frame/described, and what the server writes is read
back from SaslResult.frames_out / to_send.
"""

from __future__ import annotations

import pytest
from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    FRAME_TYPE_SASL,
    SASL_HEADER,
    FrameSplitter,
    described,
    encode_frame,
)
from amqp_conformance.peers.reference.sasl import SASL_AUTH, SASL_OK, SaslResult, SaslServer
from proton import symbol

USERS = {"alice": "pw"}
OPEN = encode_frame(described("open", container_id="client-1"))  # 2.7.1
AFTER_SASL = AMQP_HEADER + OPEN


def sasl_init(mechanism: str, response: bytes | None = None) -> bytes:
    """5.3.3.2 sasl-init; the mechanism is a symbol."""
    return encode_frame(described("sasl-init", mechanism=symbol(mechanism), initial_response=response),
                        frame_type=FRAME_TYPE_SASL)


def plain(user: str, password: str) -> bytes:
    """RFC 4616 PLAIN initial response: authzid NUL authcid NUL passwd."""
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def outcome_codes(result: SaslResult) -> list[int]:
    return [f.fields["code"] for f in result.frames_out if f.performative == "sasl-outcome"]


def offered(result: SaslResult) -> list[str]:
    (frame,) = [f for f in result.frames_out if f.performative == "sasl-mechanisms"]
    return frame.fields["sasl-server-mechanisms"]


def handshake(server: SaslServer) -> SaslResult:
    """The client's SASL header (5.3.2); the server answers with its header and sasl-mechanisms (5.3.3.1)."""
    result = server.receive_data(SASL_HEADER)
    assert [f.performative for f in result.frames_out] == ["sasl-header", "sasl-mechanisms"]
    assert not result.close
    assert result.passthrough == b""
    return result


# --- mechanisms offered ------------------------------------------------------------------------------

@pytest.mark.parametrize(("users", "expected"), [
    (None, ["ANONYMOUS", "PLAIN"]),
    ({}, ["ANONYMOUS", "PLAIN"]),
    (USERS, ["PLAIN"]),
])
def test_mechanisms_offered(users, expected):
    server = SaslServer(users)
    result = handshake(server)
    assert offered(result) == expected
    assert server.mechanisms == expected
    # what was written is exactly the captured frames, and decodes the same way
    assert result.to_send == b"".join(f.raw for f in result.frames_out)
    assert [f.performative for f in FrameSplitter("x").feed(result.to_send)] == ["sasl-header", "sasl-mechanisms"]
    assert result.to_send.startswith(SASL_HEADER)
    assert result.frames_out[1].frame_type == FRAME_TYPE_SASL


# --- outcomes ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("users", "mechanism", "response", "code", "user"), [
    pytest.param(None, "ANONYMOUS", None, SASL_OK, "anonymous", id="anonymous-no-users"),
    pytest.param(None, "PLAIN", plain("bob", "anything"), SASL_OK, "bob", id="plain-any-user-no-users"),
    pytest.param(None, "PLAIN", plain("alice", ""), SASL_OK, "alice", id="plain-empty-password-no-users"),
    pytest.param(USERS, "PLAIN", plain("alice", "pw"), SASL_OK, "alice", id="plain-right-password"),
    pytest.param(USERS, "PLAIN", plain("alice", "wrong"), SASL_AUTH, None, id="plain-wrong-password"),
    pytest.param(USERS, "PLAIN", plain("mallory", "pw"), SASL_AUTH, None, id="plain-unknown-user"),
    pytest.param(USERS, "PLAIN", plain("alice", "pw\x00x"), SASL_AUTH, None, id="plain-extra-nul"),
    pytest.param(USERS, "PLAIN", b"alice", SASL_AUTH, None, id="plain-malformed-response"),
    pytest.param(USERS, "PLAIN", None, SASL_AUTH, None, id="plain-no-response"),
    pytest.param(USERS, "ANONYMOUS", None, SASL_AUTH, None, id="anonymous-refused-with-users"),
    pytest.param(None, "SCRAM-SHA-256", b"n,,n=u,r=x", SASL_AUTH, None, id="mechanism-not-offered"),
])
def test_sasl_outcome(users, mechanism, response, code, user):
    # 5.3.3.6 sasl-code: 0 ok, 1 auth (authentication failed).
    server = SaslServer(users)
    handshake(server)
    result = server.receive_data(sasl_init(mechanism, response))
    assert [f.performative for f in result.frames_in] == ["sasl-init"]
    assert outcome_codes(result) == [code]
    assert result.frames_out[0].frame_type == FRAME_TYPE_SASL
    assert result.to_send == result.frames_out[0].raw
    assert result.close is (code != SASL_OK)
    assert server.done is (code == SASL_OK)
    assert server.user == user


def test_plain_wrong_password_closes():
    server = SaslServer(USERS)
    handshake(server)
    result = server.receive_data(sasl_init("PLAIN", plain("alice", "nope")) + AFTER_SASL)
    assert outcome_codes(result) == [1]
    assert result.close is True
    assert result.passthrough == b""  # nothing reaches proton after a failed exchange


def test_anonymous_not_offered_and_refused_with_users():
    server = SaslServer(USERS)
    assert "ANONYMOUS" not in offered(handshake(server))
    result = server.receive_data(sasl_init("ANONYMOUS"))
    assert outcome_codes(result) == [SASL_AUTH]
    assert result.close is True
    assert server.done is False


# --- passthrough -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("users", "mechanism", "response"), [
    (None, "ANONYMOUS", None),
    (None, "PLAIN", plain("bob", "x")),
    (USERS, "PLAIN", plain("alice", "pw")),
])
def test_bytes_after_sasl_init_are_passed_through(users, mechanism, response):
    server = SaslServer(users)
    handshake(server)
    result = server.receive_data(sasl_init(mechanism, response) + AFTER_SASL)
    assert outcome_codes(result) == [SASL_OK]
    assert result.passthrough == AFTER_SASL
    assert not result.close
    assert server.done


def test_whole_client_preamble_in_one_chunk():
    server = SaslServer()
    result = server.receive_data(SASL_HEADER + sasl_init("ANONYMOUS") + AFTER_SASL)
    assert [f.performative for f in result.frames_out] == ["sasl-header", "sasl-mechanisms", "sasl-outcome"]
    assert result.passthrough == AFTER_SASL


@pytest.mark.parametrize("cut", range(1, len(AFTER_SASL)))
def test_partial_frame_after_sasl_init_is_passed_through(cut):
    # Bytes that do not yet make a whole frame are passed on too, and the rest follows straight through.
    server = SaslServer()
    handshake(server)
    first = server.receive_data(sasl_init("ANONYMOUS") + AFTER_SASL[:cut])
    assert outcome_codes(first) == [SASL_OK]
    second = server.receive_data(AFTER_SASL[cut:])
    assert first.passthrough + second.passthrough == AFTER_SASL
    assert second.to_send == b"" and second.frames_out == []


def test_sasl_init_split_across_chunks():
    server = SaslServer(USERS)
    handshake(server)
    init = sasl_init("PLAIN", plain("alice", "pw"))
    partial = server.receive_data(init[:5])
    assert partial == SaslResult()
    done = server.receive_data(init[5:] + AMQP_HEADER)
    assert outcome_codes(done) == [SASL_OK]
    assert done.passthrough == AMQP_HEADER


def test_after_done_everything_is_passthrough():
    server = SaslServer()
    handshake(server)
    server.receive_data(sasl_init("ANONYMOUS"))
    junk = b"\x00\x00\x00\x01 not even framing"
    assert server.receive_data(junk) == SaslResult(passthrough=junk)


# --- client that skips SASL --------------------------------------------------------------------------

def test_amqp_header_without_sasl_passed_through_when_no_users():
    # 5.3.2 / 2.2: a client may open with the AMQP header directly; allowed only when auth is not required.
    server = SaslServer()
    result = server.receive_data(AFTER_SASL)
    assert result.passthrough == AFTER_SASL
    assert result.to_send == b""
    assert result.frames_out == []
    assert result.frames_in == []  # proton's own capture records the header
    assert not result.close
    assert server.done


def test_amqp_header_without_sasl_split_is_passed_through_when_no_users():
    server = SaslServer()
    assert server.receive_data(AMQP_HEADER[:3]) == SaslResult()
    result = server.receive_data(AMQP_HEADER[3:] + OPEN[:4])
    assert server.receive_data(OPEN[4:]).passthrough == OPEN[4:]
    assert result.passthrough == AMQP_HEADER + OPEN[:4]


def test_amqp_header_without_sasl_refused_when_users_configured():
    # 2.2: the server answers an unacceptable protocol header with the header it does support, then closes.
    server = SaslServer(USERS)
    result = server.receive_data(AFTER_SASL)
    assert result.to_send == SASL_HEADER
    assert [f.performative for f in result.frames_out] == ["sasl-header"]
    assert result.close is True
    assert result.passthrough == b""
    assert not server.done
    assert server.user is None


# --- protocol violations -----------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    pytest.param(b"\x00\x00\x00\x02\x02\x00\x00\x00", id="framing-error"),
    pytest.param(encode_frame(described("open", container_id="x")), id="amqp-frame-before-sasl"),
])
def test_protocol_violation_closes(data):
    server = SaslServer()
    result = server.receive_data(data)
    assert result.close is True
    assert result.passthrough == b""
    assert not server.done


def test_unexpected_sasl_frame_after_header_closes():
    server = SaslServer()
    handshake(server)
    result = server.receive_data(encode_frame(described("sasl-response", response=b"x"), frame_type=FRAME_TYPE_SASL))
    assert result.close is True
    assert not server.done


def test_sasl_init_before_sasl_header_is_refused():
    # 2.2: "Prior to sending any frames on a connection, each peer MUST start by sending a protocol header";
    # 5.3.2: the SASL exchange starts with the SASL protocol header. A sasl-init with no header before it
    # is a protocol violation and must not authenticate the client.
    server = SaslServer(USERS)
    result = server.receive_data(sasl_init("PLAIN", plain("alice", "pw")) + AFTER_SASL)
    assert outcome_codes(result) == []
    assert result.close is True
    assert result.passthrough == b""
    assert not server.done

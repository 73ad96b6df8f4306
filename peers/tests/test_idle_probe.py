"""The idle probe (peers/idle.py): a wait ends once the embedded broker is provably idle, and never sooner."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from amqp_conformance.peers import idle
from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.peers.idle import WireCount
from amqp_conformance.peers.peer import ExpectationFailed, PeerError, ScriptedPeer
from amqp_conformance.peers.rawpeer import RawModePeer, RawSocket
from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.fault_variants import Hangs
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.tls import server_context

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"


@pytest.fixture
def offered():
    """A reference server that offers its probe, as the embedded launcher does."""
    servers = []

    def start(broker=None, offer: bool = True, tls=None) -> ReferenceServer:
        server = ReferenceServer(broker or Broker(), tls=tls).start()
        if offer:
            idle.offer(server.host, server.port, server)
        servers.append(server)
        return server

    yield start
    for server in servers:
        idle.withdraw(server.host, server.port)
        server.stop()


def connect(server: ReferenceServer, **options) -> ScriptedPeer:
    return ScriptedPeer.connect(BrokerAddress("127.0.0.1", server.port), timeout=10, quiet=10, **options)


def test_a_wait_for_nothing_ends_when_the_broker_is_idle(offered):
    server = offered()
    with connect(server) as peer:
        peer.open()
        start = time.monotonic()
        assert peer.pump(timeout=10) is False
        assert peer.went_idle, "the 10 s wait should have ended because the broker was idle"
        assert time.monotonic() - start < 5


def test_over_tls_the_probe_counts_plaintext_as_the_peer_does(offered, tmp_path):
    # the server meters what it decrypts and encrypts, the peer what its TLS socket reads and writes: the counts
    # meet, so a wait for nothing ends by the probe over amqps too (it ran out its time before, 2 Dec 2026)
    pytest.importorskip("cryptography", reason="test certificates need the dev extra: pip install -e '.[dev]'")
    from amqp_conformance.fixtures.testpki import client_certificate_files

    server_files, client_files = client_certificate_files(tmp_path)
    server = offered(tls=server_context(server_files))
    address = BrokerAddress("127.0.0.1", server.port, "amqps", tls=client_files)
    with ScriptedPeer.connect(address, timeout=10, quiet=10) as peer:
        peer.open()
        start = time.monotonic()
        assert peer.pump(timeout=10) is False
        assert peer.went_idle, "the 10 s wait should have ended because the broker was idle"
        assert time.monotonic() - start < 5
        assert server.idle(peer.wire, [peer.wire]) == (True, [])
        one_more = WireCount(peer.wire.local, peer.wire.written + 1, peer.wire.read)
        assert server.idle(peer.wire, [one_more])[0] is False  # a plaintext byte the server has not read


def test_a_bounded_watch_outlasts_the_probe_and_the_quiet_time(offered):
    # a row's watch (Case.watch): a late effect is looked for by the clock, even from an idle broker
    server = offered()
    with ScriptedPeer.connect(BrokerAddress("127.0.0.1", server.port), timeout=10, quiet=0.05, min_watch=1.0) as peer:
        peer.open()
        start = time.monotonic()
        assert peer.pump(timeout=0.05) is False
        assert time.monotonic() - start >= 1.0
        assert not peer.went_idle
        start = time.monotonic()  # a wait whose condition is met ends at once, watch or not
        assert peer.pump(lambda: True, timeout=5) is True
        assert time.monotonic() - start < 0.5  # well short of the watch, with room for a loaded machine


def test_a_watch_lasts_for_its_block_only(offered):
    server = offered()
    with ScriptedPeer.connect(BrokerAddress("127.0.0.1", server.port), timeout=10, quiet=0.05) as peer:
        peer.open()
        with peer.watching(0.5):
            start = time.monotonic()
            assert peer.pump(timeout=0.05) is False
            assert time.monotonic() - start >= 0.5
        assert peer.min_watch == 0.0
        with pytest.raises(RuntimeError), peer.watching(0.5):
            raise RuntimeError("a step that fails inside the watch")
        assert peer.min_watch == 0.0  # the floor comes back whatever happened inside


def test_a_frame_that_never_comes_fails_at_once_and_says_why(offered):
    server = offered()
    with connect(server) as peer:
        peer.open()
        with pytest.raises(ExpectationFailed, match="the broker went idle without one"):
            peer.expect("detach", timeout=10)


def test_without_an_offer_a_wait_runs_its_time(offered):
    server = offered(offer=False)
    with connect(server) as peer:
        peer.open()
        start = time.monotonic()
        peer.pump(timeout=0.3)
        assert not peer.went_idle
        assert time.monotonic() - start >= 0.3


def test_switched_off_the_probe_is_not_used(offered):
    server = offered()
    idle.set_enabled(False)
    try:
        with connect(server) as peer:
            peer.open()
            peer.pump(timeout=0.3)
            assert not peer.went_idle
    finally:
        idle.set_enabled(True)


def test_a_connection_with_an_idle_timeout_is_never_idle(offered):
    server = offered()
    with connect(server) as peer:
        peer.engine.transport.idle_timeout = 5.0  # the broker will send heartbeats: it acts by time
        peer.open()
        peer.pump(timeout=0.3)
        assert not peer.went_idle


def test_a_hung_broker_is_never_idle(offered):
    server = offered(Hangs())
    peer = connect(server)
    start = time.monotonic()
    with pytest.raises(ExpectationFailed, match="within 0.30s"):
        peer.expect("sasl-mechanisms", timeout=0.3)
    assert time.monotonic() - start >= 0.3
    peer.close(graceful=False)


def test_a_raw_socket_waits_for_the_brokers_close_not_just_its_bytes(offered):
    server = offered()
    raw = RawSocket(BrokerAddress("127.0.0.1", server.port), timeout=10)
    raw.send_raw(b"AMQP\x09\x01\x00\x00")  # a protocol the broker does not speak: it answers and closes
    raw.pump(lambda: raw.eof, timeout=10)
    assert raw.eof, "the wait must not end as idle before the end of stream arrives"
    assert raw.frames[-1].direction == "in"
    raw.close()


def test_the_answer_requires_exact_counts(offered):
    server = offered(offer=False)
    with connect(server) as peer:
        peer.open()
        peer.pump(timeout=0.2)  # everything read by now, on a quiet loopback
        mine = peer.wire
        assert server.idle(mine, [mine]) == (True, [])
        assert server.idle(WireCount(mine.local, mine.written + 1, mine.read), [])[0] is True  # only asking's reads
        assert server.idle(mine, [WireCount(mine.local, mine.written + 1, mine.read)])[0] is False
        assert server.idle(WireCount(mine.local, mine.written, mine.read - 1), [mine])[0] is False
        assert server.idle(mine, [WireCount(mine.local, mine.written, mine.read, write_closed=True)])[0] is False
        assert server.idle(mine, [WireCount("127.0.0.1:1")])[0] is False  # a connection not accepted yet


def test_closed_wires_read_to_the_end_are_forgotten(offered):
    server = offered()
    first = connect(server)
    first.open()
    first.close()
    with connect(server) as second:
        second.open()
        second.pump(timeout=10)
        assert second.went_idle
        offer = second._watch._offer
        assert all(w is not first.wire for w in offer.wires)


def test_a_dead_server_is_never_idle(offered):
    server = offered()
    with connect(server) as peer:
        peer.open()
        server.stop()
        assert server.idle(peer.wire, [peer.wire]) == (False, [])


def run_tables(out: Path, *options: str) -> dict[str, str]:
    """Three tables' verdicts, eight cases side by side (``run -n 8``; both runs a test compares run so: the probe is
    the one difference between them, and one at a time the run without it waited 38 s of the 48 s, 7 Dec 2026)."""
    import json

    command = [sys.executable, "-m", "pytest", str(CONFORMANCE), "-c", str(CONFORMANCE / "pytest.ini"),
               "--rootdir", str(CONFORMANCE), "-q", "-p", "no:randomly", "--amqp-out", str(out),
               "-k", "um.accepted.subscribe or core.settlement or router.anycast", "--case-timeout", "1",
               "--amqp-jobs", "8", *options]
    subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    return {r["case_id"] + ":" + r["expectation_set"]: r["verdict"]
            for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


@pytest.mark.parametrize(("mutant", "broken"), [
    (None, False), ("ignores-stateless-disposition", True), ("settles-before-accept", True),
    ("variant-client-certificate", False),  # a conformant variant served over TLS (amqps, SASL EXTERNAL)
], ids=lambda value: str(value))
def test_the_probe_changes_time_not_verdicts(tmp_path, mutant, broken):
    options = ("--reference-mutant", mutant) if mutant else ()
    probed = run_tables(tmp_path / "probed", *options)
    timed = run_tables(tmp_path / "timed", "--no-idle-probe", *options)
    assert probed and probed == timed
    assert ("FAIL" in probed.values()) is broken



def test_nothing_is_written_or_logged_after_our_own_half_close(offered):
    """A write after the peer shut its sending side fails at once, and the frame log does not show it as sent:
    a raw socket's, and a proton peer's in raw mode (both ``send_raw``s)."""
    server = offered()
    raw = RawSocket(BrokerAddress("127.0.0.1", server.port), timeout=10)
    scripted = RawModePeer.connect(BrokerAddress("127.0.0.1", server.port), timeout=10, quiet=10)
    scripted.go_raw()
    for peer in (raw, scripted):
        logged = len(peer.frames)
        peer.shutdown_write()
        with pytest.raises(PeerError, match="sending side"):
            peer.send_raw(b"AMQP\x00\x01\x00\x00")
        assert len(peer.frames) == logged
    raw.close()
    scripted.close()

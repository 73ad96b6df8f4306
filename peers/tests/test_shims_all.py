"""Every client shim under peers/shims, built from its registry into a fresh cache, sends and receives through
the interposer (peers/relay.py) against the embedded reference broker; the relay sees each client's frames.

Where a shim's tools are missing here (``ShimUnavailable``: no ``go``, no ``mvn``...) its test skips saying
which; with ``AMQP_CONFORMANCE_REQUIRE_SHIMS=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.conformant_variants import CreditOnce
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.relay import FrameRelay
from amqp_conformance.peers.shimrun import ShimProcess, ShimUnavailable, discover, ensure_built

SHIMS = discover()
REQUIRED = os.environ.get("AMQP_CONFORMANCE_REQUIRE_SHIMS") == "1"


@pytest.fixture(scope="module")
def reference() -> tuple[str, int]:
    """The embedded reference broker: (host, port)."""
    server = ReferenceServer(Broker()).start()
    yield "127.0.0.1", server.port
    server.stop()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for this module's builds (the shims' registries' own caches stay the user's)."""
    return tmp_path_factory.mktemp("shim-cache")


def built(client: str, cache: Path) -> Path:
    """The shim of ``client`` built in ``cache``: skips saying why where its tools are missing (fails in CI)."""
    try:
        return ensure_built(SHIMS[client], cache)
    except ShimUnavailable as exc:
        if REQUIRED:
            pytest.fail(f"AMQP_CONFORMANCE_REQUIRE_SHIMS=1 and {exc}")
        pytest.skip(str(exc))


def test_every_shim_folder_is_found() -> None:
    assert {"python-proton", "qpid-jms", "protonj2", "rhea", "go-amqp", "proton-cpp"} <= set(SHIMS)
    assert len({spec.language for spec in SHIMS.values()}) >= 4


@pytest.mark.parametrize("client", sorted(SHIMS))
def test_a_shim_sends_and_receives_through_the_relay_and_the_relay_sees_its_frames(
        client: str, reference: tuple[str, int], cache: Path, tmp_path: Path) -> None:
    spec = SHIMS[client]
    home = built(client, cache)
    node = f"q.shims.{client}"
    with FrameRelay(*reference, label=client) as relay, \
            ShimProcess(spec, home, stderr_path=tmp_path / "stderr.log") as shim:
        hello = shim.request("hello", 30)
        assert hello["ok"] and hello["client"] == client, hello
        assert hello["version"].startswith(spec.version) or spec.version.startswith(hello["version"]), hello
        url = f"amqp://{relay.url_host}:{relay.port}"
        assert shim.request("connect", 30, url=url, container_id=f"interop-{client}", timeout_ms=10000)["ok"]
        for link, role in (("s1", "sender"), ("r1", "receiver")):
            reply = shim.request("attach", 20, link=link, role=role, address=node, snd_settle_mode="unsettled",
                                 rcv_settle_mode="first", timeout_ms=10000)
            assert reply["ok"], reply
        sent = shim.request("send", 20, link="s1", messages=[{"body": "m1", "settled": False}], timeout_ms=10000)
        assert sent["ok"], sent
        [report] = sent["deliveries"]
        assert report["remote_state"] in ({"type": "accepted"}, None), report  # None: an API that tells nothing
        received = shim.request("receive", 20, link="r1", count=1, outcome={"type": "accepted"}, settle=True,
                                timeout_ms=10000)
        assert received["ok"], received
        assert [d["body"] for d in received["deliveries"]] == ["m1"]
        assert shim.request("close", 20, timeout_ms=10000)["ok"]
        assert relay.wait_closed(0, timeout=10)
        frames = relay.connection(0).frames
    assert shim.returncode == 0, shim.stderr_tail()
    sent_by_client = [f.performative for f in frames if f.direction == "out"]
    assert {"open", "begin", "attach", "transfer", "disposition", "close"} <= set(sent_by_client), sent_by_client
    client_dispositions = [f for f in frames if f.direction == "out" and f.performative == "disposition"]
    assert any(f.fields["role"] == "receiver" and f.fields["state"] is not None for f in client_dispositions), \
        "the receiving client's accepted disposition"
    broker_answers = [f for f in frames if f.direction == "in" and f.performative == "disposition"]
    assert any(f.fields["settled"] for f in broker_answers), "the broker settled the client's transfer"


def test_rhea_hands_a_message_to_its_sender_only_while_sendable_says_it_may(cache: Path, tmp_path: Path) -> None:
    """rhea's shim sends the way rhea's examples do, while ``sender.sendable()`` is true and again on the
    ``sendable`` event, so the grid judges what rhea's API says of credit: against a broker that grants one
    credit and never more, the first message goes and the second is never handed to rhea, and its report says
    why. (A shim that handed every message to ``Sender.send`` at once would report the second with a tag,
    queued inside rhea.)"""
    home = built("rhea", cache)
    server = ReferenceServer(CreditOnce()).start()
    try:
        with ShimProcess(SHIMS["rhea"], home, stderr_path=tmp_path / "stderr.log") as shim:
            url = f"amqp://127.0.0.1:{server.port}"
            assert shim.request("connect", 30, url=url, container_id="interop-rhea-credit", timeout_ms=10000)["ok"]
            assert shim.request("attach", 20, link="s1", role="sender", address="q.shims.credit-once",
                                snd_settle_mode="unsettled", rcv_settle_mode="first", timeout_ms=10000)["ok"]
            sent = shim.request("send", 20, link="s1", messages=[{"body": "m1", "settled": False},
                                                                 {"body": "m2", "settled": False}], timeout_ms=1000)
            assert shim.request("close", 20, timeout_ms=10000)["ok"]
    finally:
        server.stop()
    first, second = sent["deliveries"]
    assert first["remote_state"] == {"type": "accepted"}, first
    assert first["api"].startswith("Sender.sendable() true, Sender.send() returned"), first
    assert (second["index"], second["tag"], second["remote_state"]) == (1, None, None), second
    assert second["api"] == "not sent: Sender.sendable() false and no 'sendable' event within 1000 ms", second

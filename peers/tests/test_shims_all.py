"""Every client shim under peers/shims, built from its registry into a fresh cache, sends and receives through
the interposer (peers/relay.py) against the embedded reference broker; the relay sees each client's frames.

Where a shim's tools are missing here (``ShimUnavailable``: no ``go``, no ``mvn``...) its test skips saying
which; with ``AMQP_CONFORMANCE_REQUIRE_SHIMS=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from amqp_conformance.conformance.interop_observe import cell_frames
from amqp_conformance.conformance.interop_told import ApiClaims
from amqp_conformance.conformance.interop_told_endpoints import endpoint_disagreements
from amqp_conformance.conformance.interop_told_errors import told_errors
from amqp_conformance.peers.reference.broker import Broker, BrokerConnection
from amqp_conformance.peers.reference.conformant_variants import (
    STATED_CAPABILITIES,
    STATED_LINK_DESIRED,
    STATED_LINK_PROPERTIES,
    STATED_MAX_MESSAGE_SIZE,
    CreditOnce,
    StatesEndpointFields,
)
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.relay import FrameRelay
from amqp_conformance.peers.shimrun import ShimProcess, ShimUnavailable, discover, ensure_built
from amqp_conformance.peers.shimrun.process import ShimReply
from proton import Delivery

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


def connect_and_attach(shim: ShimProcess, port: int, container: str, link: str, role: str, address: str) -> None:
    """Connect ``shim`` to the broker on ``port`` of this host and attach ``link`` in ``role`` at ``address``
    (unsettled, rcv-settle-mode first), asserting each reply is ok."""
    url = f"amqp://127.0.0.1:{port}"
    assert shim.request("connect", 30, url=url, container_id=container, timeout_ms=10000)["ok"]
    assert shim.request("attach", 20, link=link, role=role, address=address, snd_settle_mode="unsettled",
                        rcv_settle_mode="first", timeout_ms=10000)["ok"]


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
            connect_and_attach(shim, server.port, "interop-rhea-credit", "s1", "sender", "q.shims.credit-once")
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


@pytest.mark.parametrize("client", ["python-proton", "rhea"])
def test_a_shim_reports_the_fields_of_the_brokers_open_and_attach_as_its_api_tells_them(client: str, cache: Path,
                                                                                        tmp_path: Path) -> None:
    """Both shims report the broker's open and attach fields, held to the frames as the grid holds them
    (interop_told_endpoints): against a variant that states capabilities in its open and properties, capabilities
    and max-message-size in each attach, no disagreement, and each value is there (rhea all of them; python-proton
    all but the link capabilities its API has no accessor for, which its reply leaves out)."""
    home = built(client, cache)
    server = ReferenceServer(StatesEndpointFields()).start()
    try:
        with FrameRelay("127.0.0.1", server.port, label=client) as relay, \
                ShimProcess(SHIMS[client], home, stderr_path=tmp_path / "stderr.log") as shim:
            url = f"amqp://{relay.url_host}:{relay.port}"
            connected = shim.request("connect", 30, url=url, container_id="interop-fields", timeout_ms=10000)
            attached = shim.request("attach", 20, link="r1", role="receiver", address="q.shims.fields",
                                    snd_settle_mode="unsettled", rcv_settle_mode="first", timeout_ms=10000)
            assert shim.request("close", 20, timeout_ms=10000)["ok"]
            assert relay.wait_closed(0, timeout=10)
            frames = relay.connection(0).frames
    finally:
        server.stop()
    assert connected["ok"] and attached["ok"], (connected, attached)
    cell = cell_frames([], frames)
    claims = ApiClaims(remote_endpoint_fields={"receiver": True})  # as both clients' profiles claim
    assert endpoint_disagreements(cell, {"receiver": connected}, {"receiver": attached}, claims) == []
    assert set(connected["remote_properties"]) == {"product", "version"}
    assert sorted(connected["remote_offered_capabilities"]) == sorted(str(c) for c in STATED_CAPABILITIES)
    assert attached["remote_max_message_size"] == STATED_MAX_MESSAGE_SIZE
    assert attached["remote_properties"] == {str(k): v for k, v in STATED_LINK_PROPERTIES.items()}
    told_link_capabilities = attached.get("remote_offered_capabilities"), attached.get("remote_desired_capabilities")
    assert told_link_capabilities == ((["x-amqp-conformance-link-offered"], [str(c) for c in STATED_LINK_DESIRED])
                                      if client == "rhea" else (None, None))
    assert client == "rhea" or not {"remote_offered_capabilities", "remote_desired_capabilities"} & set(attached)


CLOSED_WITH = ("amqp:resource-deleted", "this broker closes a publisher's link at its first transfer")


class ClosesPublishers(Broker):
    """Closes a publisher's link with :data:`CLOSED_WITH` when its first transfer arrives, leaving the delivery
    unsettled (AMQP 1.0 2.6.6: a detach with closed=true and an error)."""

    def _on_published(self, connection: BrokerConnection, delivery: Delivery) -> None:
        self.close_link(delivery.link, self.condition(*CLOSED_WITH))


@pytest.mark.parametrize("client", sorted(SHIMS))
def test_a_shim_tells_the_error_of_a_link_closed_while_its_send_waits(client: str, cache: Path,
                                                                       tmp_path: Path) -> None:
    """A broker that closes a publisher's link with an error while the shim's send waits for the delivery's
    outcome: the shim tells that error as its API gave it, in the send's failed reply or an event
    (peers/shims/README.md), with the wire's condition at link scope, as the grid counts what an API told
    (``told_errors``), never only as text in a delivery's report (the grid would then hold the API to have told
    nothing)."""
    home = built(client, cache)
    server = ReferenceServer(ClosesPublishers()).start()
    try:
        with ShimProcess(SHIMS[client], home, stderr_path=tmp_path / "stderr.log") as shim:
            connect_and_attach(shim, server.port, f"interop-{client}-closed", "s1", "sender",
                               f"q.shims.closed.{client}")
            asked = time.monotonic()
            sent = shim.request("send", 20, link="s1", messages=[{"body": "m1", "settled": False}], timeout_ms=10000)
            answered = time.monotonic()
            shim.request("close", 20, timeout_ms=5000)
            events = list(shim.events)
    finally:
        server.stop()
    told = told_errors([ShimReply("sender", "send", asked, answered, sent)], events)
    assert any((t["scope"], t["condition"]) == ("link", CLOSED_WITH[0]) for t in told), (sent, events)


def drained_through_relay(client: str, home: Path, port: int, tmp_path: Path) -> tuple[dict, list, int]:
    """Through an interposer to the broker on ``port``: ``client``'s shim attaches a receiver it will drain (an
    empty node) and drains 2 credits within 1.5 s. The drain's reply, the connection's frames and when the reply
    came (the frames' clock)."""
    with FrameRelay("127.0.0.1", port, label=client) as relay, \
            ShimProcess(SHIMS[client], home, stderr_path=tmp_path / f"stderr-{port}.log") as shim:
        url = f"amqp://{relay.url_host}:{relay.port}"
        assert shim.request("connect", 30, url=url, container_id=f"interop-{client}-drain", timeout_ms=10000)["ok"]
        attached = shim.request("attach", 20, link="r1", role="receiver", address=f"q.shims.drain.{client}",
                                snd_settle_mode="unsettled", rcv_settle_mode="first", drains=True, timeout_ms=10000)
        assert attached["ok"], attached
        drained = shim.request("drain", 20, link="r1", credit=2, timeout_ms=1500)
        replied_ns = time.monotonic_ns()
        assert shim.request("close", 20, timeout_ms=10000)["ok"]
        assert relay.wait_closed(0, timeout=10)
        return drained, relay.connection(0).frames, replied_ns


DRAIN_ROW = "interop.flow/receiver-drains-an-empty-node"


@pytest.mark.parametrize("client", sorted(SHIMS))
def test_a_shims_drain_ends_when_the_brokers_flow_uses_the_credit_up_and_never_on_a_timer(
        client: str, reference: tuple[str, int], cache: Path, tmp_path: Path) -> None:
    """The contract's ``drain`` (peers/shims/README.md, "Draining"): a shim whose client profile claims ``drain``
    asks its library to drain 2 credits of an empty node, and its reply and the wire are what the grid's drain row
    expects of them against the reference (its observations ``receiver_drain`` and ``receiver_drained``, or what
    a deviation the client's profile declares for the row observes), and the reply never came before the broker's
    frames used the credit up; against a broker that ignores drains the reply is ``timeout``. A shim whose profile
    does not claim it answers ``unsupported``."""
    from amqp_conformance.conformance.catalogue import all_cases
    from amqp_conformance.conformance.interop_drain import (
        drain_wire,
        drained_disagreements,
        receiver_drain,
        receiver_drained,
    )
    from amqp_conformance.conformance.interop_observe import connection_frames
    from amqp_conformance.fixtures.profiles import CLIENT_PROFILES_DIR, load_profile
    from amqp_conformance.peers.matching import mismatches
    from amqp_conformance.peers.reference.mutants import IgnoresDrain

    home = built(client, cache)
    profile = load_profile(client, CLIENT_PROFILES_DIR)
    drained, frames, replied_ns = drained_through_relay(client, home, reference[1], tmp_path)
    if "drain" not in profile.capabilities:
        assert drained["error"]["kind"] == "unsupported", drained
        return
    wire = drain_wire(connection_frames(frames, "receiver"))
    observed = {"receiver_drain": receiver_drain(wire), "receiver_drained": receiver_drained(drained)}
    row = all_cases()[DRAIN_ROW].expect["core"]
    declared = [{name: d.observed[name] for name in observed if name in d.observed}  # the drain's share of it
                for d in profile.deviations_for(DRAIN_ROW, "core") if set(observed) & set(d.observed)]
    expected = [{name: row[name] for name in observed}, *declared]
    expected[0]["receiver_drain"] = {**row["receiver_drain"], "deliveries": 0}  # the row's link took m1 first
    assert any(not mismatches(pattern, observed) for pattern in expected), (observed, frames)
    assert drained_disagreements(wire, drained, replied_ns) == []
    ignoring = ReferenceServer(IgnoresDrain()).start()
    try:
        unanswered, _, _ = drained_through_relay(client, home, ignoring.port, tmp_path)
    finally:
        ignoring.stop()
    assert unanswered["error"]["kind"] == "timeout", unanswered


def test_qpid_jms_shim_answers_hung_when_its_receive_outlives_its_deadline(cache: Path, tmp_path: Path) -> None:
    """qpid-jms's ``MessageConsumer.receive(timeout)`` drains once the time-out passes and waits for the peer's
    answer (its amqp.drainTimeout, 60 s). Against a broker that leaves the drain unanswered (2.6.7: the sender SHOULD
    answer) the shim answers ``hung`` a second past the command's deadline, as the contract asks, then every later
    command too, and exits at the end of its input without waiting on the library: the grid FAILs the cell naming
    the call, where a shim that went silent made it an ERROR of the harness."""
    from amqp_conformance.peers.reference.mutants import IgnoresDrain

    home = built("qpid-jms", cache)
    server = ReferenceServer(IgnoresDrain()).start()
    try:
        with ShimProcess(SHIMS["qpid-jms"], home, stderr_path=tmp_path / "stderr.log") as shim:
            connect_and_attach(shim, server.port, "interop-jms-hung", "r1", "receiver", "q.shims.jms-hung")
            started = time.monotonic()
            received = shim.request("receive", 20, link="r1", count=1, outcome={"type": "accepted"}, settle=True,
                                    timeout_ms=1000)
            took = time.monotonic() - started
            later = shim.request("close", 20, timeout_ms=5000)
            shim.close(timeout=10)
    finally:
        server.stop()
    assert received["error"] == {"kind": "hung", "description": "qpid-jms's receive did not return within its 1000 "
                                                                "ms deadline and 1000 ms more"}, received
    assert took < 5, took
    assert later["error"]["kind"] == "hung", later
    assert shim.returncode == 0, shim.stderr_tail()

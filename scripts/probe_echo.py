"""Probe (not a test): does a broker answer a flow with ``echo=true``, and on which flows?

A flow with echo set asks the partner to send its own flow state (AMQP 1.0 2.7.4: "SHOULD"). Answered in
order, it would be a barrier: proof that the broker has handled every frame sent before it. This starts the
named broker (as ``run --broker`` does), sends one echo on a session flow, on a consumer's link and on a
publisher's link, each on a fresh connection, and prints what came back and how fast.

    python scripts/probe_echo.py rabbitmq
"""

from __future__ import annotations

import argparse
import sys
import time

from amqp_conformance.fixtures.brokers import UsageProblem, resolve
from amqp_conformance.peers.frames import described, encode_frame
from amqp_conformance.peers.peer import ScriptedPeer
from proton import uint

WINDOW = uint(2147483647)


def probe(address, node: str, kind: str) -> str:
    """One echo of ``kind`` ("session", "consumer link", "publisher link") on a fresh connection."""
    with ScriptedPeer.connect(address, timeout=3) as peer:
        peer.open()
        session = peer.begin()
        fields = {"next_incoming_id": uint(0), "incoming_window": WINDOW, "next_outgoing_id": uint(0),
                  "outgoing_window": WINDOW, "echo": True}
        if kind == "consumer link":
            link, _ = peer.attach_receiver(session, node, credit=5)
            fields.update(handle=uint(peer.handle_of(link)), delivery_count=uint(0), link_credit=uint(5))
        elif kind == "publisher link":
            link, _ = peer.attach_sender(session, node)
            peer.wait_for_credit(link)
            fields.update(handle=uint(peer.handle_of(link)), delivery_count=uint(0), link_credit=uint(0))
        peer.pump(timeout=0.2)  # whatever the attach brings has come
        since = peer.mark()
        started = time.monotonic()
        peer.send_raw(encode_frame(described("flow", **fields)))
        answered = peer.pump(lambda: any(f.direction == "in" for f in peer.frames[since:]), 2.0)
        took = (time.monotonic() - started) * 1000
        shown = ("handle", "link-credit", "echo")
        seen = [f"{f.performative} {({k: v for k, v in f.fields.items() if k in shown})}"
                for f in peer.frames[since:] if f.direction == "in"]
        outcome = f"answered in {took:.1f} ms" if answered else "no answer within 2 s"
        return f"{kind}: {outcome} {seen}"


def main() -> int:
    """Start the broker, probe, stop it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("broker", help="a registered broker (amqp-conformance brokers)")
    args = parser.parse_args()
    try:
        choice = resolve(args.broker, None, None)
        choice.prepare()
        broker = choice.start()
    except UsageProblem as exc:
        print(f"probe_echo: {exc}", file=sys.stderr)
        return 2
    try:
        for kind in ("session", "consumer link", "publisher link"):
            print(f"{args.broker} {probe(broker.address, f'{broker.profile.node_prefix}probe.echo', kind)}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Several consumers of one queue (AMQP 1.0 3.5.3 distribution-mode move, 2.6.7 credit is per link).

:func:`run_consumers` attaches one consumer per entry of ``credits`` (each on its own connection, with no
credit), stores ``messages`` messages, then grants each consumer its credit, and observes who got what.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from amqp_conformance.peers.peer import ExpectationFailed

from .context import CaseContext, open_session, setup_step
from .scripts import broker_handle, delivered_on, remaining_on_node
from .scripts_core import publish


def run_consumers(ctx: CaseContext, given: dict[str, Any]) -> dict[str, Any]:
    """Observes ``before_credit`` (bodies any consumer got before it had credit), ``counts`` (how many
    messages each consumer got, in attach order), ``union`` (every body delivered, sorted), ``duplicates``
    (how many deliveries repeated a body another, or the same, consumer already had) and ``remaining`` (what
    a fresh consumer gets once all have closed).

    ``publisher = "first-consumer-link-name"`` stores the messages on the first consumer's connection and
    session, over a sending link named as that consumer's link (a link name is unique per direction only,
    2.6.1), closed once they are stored and before any consumer has credit."""
    consumers = []
    first_session = None
    for index, _ in enumerate(given["credits"]):
        peer, session = open_session(ctx, f"consumer-{index + 1}")
        receiver, attach = setup_step(f"attach consumer {index + 1}", peer.attach_receiver, session, ctx.node,
                                      credit=0)
        consumers.append((peer, receiver, broker_handle(attach), peer.mark()))
        first_session = first_session or session
    if given["publisher"] == "first-consumer-link-name":
        publisher, receiver = consumers[0][0], consumers[0][1]
        since = publisher.mark()
        attach = publish(ctx, publisher, first_session, given["messages"], name=receiver.name)
        setup_step("the broker's detach of the publisher", publisher.expect, "detach", since,
                   handle=attach.fields["handle"])
    else:
        publisher, session = open_session(ctx, "publisher")
        publish(ctx, publisher, session, given["messages"])
    publisher.pump(timeout=ctx.quiet)
    for peer, _, _, _ in consumers:  # read what reached each consumer with no credit: a pump of 0 reads nothing
        peer.pump(timeout=ctx.quiet)
    before = [body for peer, _, handle, since in consumers for body in delivered_on(peer, handle, since)]
    marks = []
    for (peer, receiver, _, _), credit in zip(consumers, given["credits"], strict=True):
        marks.append(peer.mark())
        receiver.flow(credit)
        peer.pump(timeout=0)
    expected = min(sum(given["credits"]), given["messages"])
    per_consumer: list[list[Any]] = [[] for _ in consumers]
    for index, ((peer, receiver, _, _), since) in enumerate(zip(consumers, marks, strict=True)):
        while len(per_consumer[index]) < given["credits"][index]:
            wait = ctx.timeout if sum(map(len, per_consumer)) < expected else ctx.quiet
            try:
                received = peer.receive(receiver, peer.mark() if per_consumer[index] else since, timeout=wait)
            except ExpectationFailed:
                break
            per_consumer[index].append(received.message.body)
            peer.dispose(received.delivery, "accepted", settle=True)
    for peer, _, _, _ in consumers:
        peer.pump(timeout=0)
    delivered = [body for bodies in per_consumer for body in bodies]
    observed = {"before_credit": before, "counts": [len(bodies) for bodies in per_consumer],
                "union": sorted(set(delivered)), "duplicates": sum(n - 1 for n in Counter(delivered).values())}
    for peer, _, _, _ in consumers:
        peer.close()
    observed["remaining"] = remaining_on_node(ctx)
    return observed

"""Sans-I/O tests of the reference broker's delivery-state semantics (AMQP 1.0 3.4.4 released, 3.4.5 modified)."""

from __future__ import annotations

from amqp_conformance.peers.reference.broker import Broker, Consumer
from amqp_conformance.peers.reference.outcomes import redelivery_bytes
from amqp_conformance.peers.reference.store import Node
from proton import Message, symbol


def encoded(**annotations) -> bytes:
    return Message(body="m1", annotations={symbol(k): v for k, v in annotations.items()} or None).encode()


def decoded(data: bytes) -> Message:
    message = Message()
    message.decode(data)
    return message


def test_released_leaves_the_message_untouched():
    original = encoded(origin="p")
    assert redelivery_bytes(original, delivery_failed=False, annotations=None) == original


def test_delivery_failed_increments_the_header_delivery_count_each_time():
    once = redelivery_bytes(encoded(), delivery_failed=True, annotations=None)
    twice = redelivery_bytes(once, delivery_failed=True, annotations=None)
    assert decoded(once).delivery_count == 1
    assert decoded(twice).delivery_count == 2
    assert decoded(twice).body == "m1"


def test_modified_annotations_merge_and_win():
    data = redelivery_bytes(encoded(origin="p", note="old"), delivery_failed=False,
                            annotations={symbol("note"): "new", symbol("extra"): 1})
    assert decoded(data).annotations == {"origin": "p", "note": "new", "extra": 1}
    assert decoded(data).delivery_count == 0


def test_take_for_skips_messages_undeliverable_on_that_link():
    # the broker's own selection (Broker.take_for), the one dispatch uses
    node = Node("q")
    first, second = node.publish(b"1"), node.publish(b"2")
    consumer = Consumer(link=None, node=node, subscription=node.queue)  # type: ignore[arg-type]
    take_for = Broker().take_for
    taken = take_for(consumer, {first.eid})
    assert taken is not None and taken.eid == second.eid
    assert [m.eid for m in node.queue.pending] == [first.eid]
    assert second.eid in node.queue.outstanding
    assert take_for(consumer, {first.eid}) is None
    assert take_for(consumer, ()).eid == first.eid

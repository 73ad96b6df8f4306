"""A delivery-tag is binary (AMQP 1.0 2.8.7): a tag that is not UTF-8 text is as good as any, and the
reference broker reads it exactly (proton's Python binding raises UnicodeDecodeError for one; that crashed the
broker's server thread)."""

from __future__ import annotations

from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.reference.um_rules import stored_count
from proton import Delivery, Message
from proton.utils import BlockingConnection

TAG = b"\x92\xff\x00tag"


def test_a_publish_with_a_tag_that_is_not_utf8_is_accepted_and_the_broker_lives():
    broker = Broker()
    server = ReferenceServer(broker).start()
    try:
        connection = BlockingConnection(f"amqp://127.0.0.1:{server.port}", timeout=5, allowed_mechs="ANONYMOUS")
        try:
            link = connection.create_sender("q").link
            delivery = link.delivery(TAG)
            link.send(Message(body="x").encode())
            link.advance()
            connection.wait(lambda: delivery.remote_state != 0, timeout=5, msg="no disposition")
            assert delivery.remote_state == Delivery.ACCEPTED
        finally:
            connection.close()
        assert server.alive()
        assert stored_count(broker.store.nodes["q"]) == 1
    finally:
        server.stop()

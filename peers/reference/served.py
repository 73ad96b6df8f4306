"""What ``amqp-conformance serve`` adds to the reference broker (or router): rules chosen per connection, and
an admin node, so one served broker is judged by every expectation set it claims, with its provocations.

- A client names the expectation set its connection is judged under as the open frame's ``hostname``
  (:data:`POLICY_HOSTNAMES`); that connection then gets the broker's policy for the set, whatever other
  connections use. Any other hostname (the usual: the host dialled) gets the broker's own policy. Several runs,
  or pytest-xdist workers, can so share one served broker.
- Messages sent to :data:`ADMIN_NODE` are admin requests, handed whole to ``admin_endpoint`` (encoded message
  -> None when done, or the condition to reject it with); see ``fixtures/amqp_admin.py`` for their form.

This sits beside the socket loop, outside the protocol logic the catalogue and the mutation score judge: the
embedded broker never needs it (its admin changes it directly).
"""

from __future__ import annotations

from collections.abc import Callable

from proton import Condition, Delivery, Event, symbol

from .broker import Broker, BrokerConnection, Policy

POLICY_HOSTNAMES = ("core", "um-10.11", "router")
ADMIN_NODE = "$conformance-admin"
ADMIN_PROPERTY = "conformance-admin"  # a link property of the admin link's attach: this broker serves the admin


class Served(Broker):
    """The behaviour above, over a :class:`Broker` or a subclass of it (use :func:`served`)."""

    admin_endpoint: Callable[[bytes], Condition | None] | None = None

    def policy_of(self, connection: BrokerConnection) -> Policy:
        """The policy in force on ``connection``: its open hostname's set's, else the broker's."""
        hostname = connection.engine.connection.remote_hostname or ""
        return self.policy_for(hostname) if hostname in POLICY_HOSTNAMES else self.policy

    def handle(self, connection: BrokerConnection, mid_read: bool = False) -> None:
        """Act on ``connection``'s events under its own policy (the broker's is put back afterwards)."""
        saved, self.policy = self.policy, self.policy_of(connection)
        try:
            super().handle(connection, mid_read)
        finally:
            self.policy = saved

    def _on_pn_link_remote_open(self, connection: BrokerConnection, event: Event) -> None:
        link = event.link
        if self.admin_endpoint is not None and link.is_receiver and (link.remote_target.address or "") == ADMIN_NODE:
            link.properties = {symbol(ADMIN_PROPERTY): True}  # tells the admin apart from a node storing requests
        super()._on_pn_link_remote_open(connection, event)

    def _on_pn_delivery(self, connection: BrokerConnection, event: Event) -> None:
        link = event.delivery.link
        if self.admin_endpoint is not None and link.is_receiver and (link.remote_target.address or "") == ADMIN_NODE:
            self._on_admin_request(connection, event.delivery)
        else:
            super()._on_pn_delivery(connection, event)

    def _on_admin_request(self, connection: BrokerConnection, delivery: Delivery) -> None:
        """A whole admin request: settled accepted when the endpoint did it, rejected with its condition."""
        if delivery.aborted:
            delivery.settle()
            self.give_credit_back(connection, delivery.link)
            return
        if delivery.partial:
            return  # wait for the rest
        link = delivery.link
        encoded = link.recv(delivery.pending)
        link.advance()
        assert self.admin_endpoint is not None
        error = self.admin_endpoint(encoded)
        if error is not None:
            delivery.local.condition = error
        delivery.update(Delivery.ACCEPTED if error is None else Delivery.REJECTED)
        delivery.settle()
        self.give_credit_back(connection, link)


def served(broker_class: type[Broker]) -> type[Broker]:
    """``broker_class`` (Broker, Router) with what ``serve`` adds (see the module docstring)."""
    return type(f"Served{broker_class.__name__}", (Served, broker_class), {})

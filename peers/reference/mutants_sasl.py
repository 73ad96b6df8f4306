"""Mutants of the SASL layer (AMQP 1.0 5.3): each breaks one guarantee ``core.sasl`` checks.

Registered into :data:`.mutants.MUTANTS` by one line there; their scope is ``core.sasl``.
"""

from __future__ import annotations

from .accounts import OneAccount
from .broker import BrokerConnection
from .mutants import Mutant
from .sasl import SaslResult, SaslServer

SASL_SCOPE = ("core.sasl",)


class AcceptsAnyPassword(OneAccount):
    """Has an account, but its SASL layer was built without it: PLAIN takes any password."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose SASL layer knows no account (so PLAIN takes anyone, ANONYMOUS too)."""
        connection = super().new_connection(peer_name)
        connection.sasl = SaslServer()
        return connection


class DropsPipelinedSasl(SaslServer):
    """Forgets the bytes that came behind the sasl-init in the read that completed the exchange."""

    def receive_data(self, data: bytes) -> SaslResult:
        """As the server's, but nothing passes on from the read whose sasl-init completed the exchange."""
        exchanged = self._header_seen and not self.done
        result = super().receive_data(data)
        if exchanged and self.done:
            result.passthrough = b""
        return result


class DropsPipelinedOpen(OneAccount):
    """Drops the AMQP header and open a client pipelined behind its sasl-init (2.4.2)."""

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose SASL layer drops what came behind the sasl-init."""
        connection = super().new_connection(peer_name)
        connection.sasl = DropsPipelinedSasl(self.users)
        return connection


SASL_MUTANTS = tuple(Mutant(*fields, scope=SASL_SCOPE) for fields in (
    ("accepts-any-password", "has an account but takes any password with PLAIN",
     "5.3.3.6 auth: the supplied credentials are refused (core.sasl/wrong-password)", AcceptsAnyPassword),
    ("drops-pipelined-open", "drops the AMQP header and open pipelined behind the sasl-init",
     "2.4.2 pipelined open; 5.3.2 the AMQP header follows the outcome (core.sasl/pipelined-open)",
     DropsPipelinedOpen),
))

"""Mutants of the SASL layer (AMQP 1.0 5.3): each breaks one guarantee ``core.sasl`` checks.

Registered into :data:`.mutants.MUTANTS` by one line there; their scope is ``core.sasl``.
"""

from __future__ import annotations

from ..frames import AMQP_HEADER, FRAME_TYPE_AMQP
from .accounts import OneAccount
from .broker import Broker, BrokerConnection
from .mutant_kit import Mutant
from .sasl import SaslResult, SaslServer

SASL_SCOPE = ("core.sasl",)


class SwapsSaslLayer(Broker):
    """A broker whose connections run ``sasl_layer`` (built with the broker's accounts) as their SASL layer."""

    sasl_layer: type[SaslServer] = SaslServer

    def new_connection(self, peer_name: str) -> BrokerConnection:
        """A connection whose SASL layer is the mutant's."""
        connection = super().new_connection(peer_name)
        connection.sasl = self.sasl_layer(self.users)
        return connection


class SaslWithoutAccounts(SaslServer):
    """Built without the broker's accounts, whatever it is given: PLAIN takes anyone, ANONYMOUS too."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        super().__init__()


class AcceptsAnyPassword(SwapsSaslLayer, OneAccount):
    """Has an account, but its SASL layer was built without it: PLAIN takes any password."""

    sasl_layer = SaslWithoutAccounts


class DropsPipelinedSasl(SaslServer):
    """Forgets the bytes that came behind the sasl-init in the read that completed the exchange."""

    def receive_data(self, data: bytes) -> SaslResult:
        """As the server's, but nothing passes on from the read whose sasl-init completed the exchange."""
        exchanged = self._header_seen and not self.done
        result = super().receive_data(data)
        if exchanged and self.done:
            result.passthrough = b""
        return result


class DropsPipelinedOpen(SwapsSaslLayer, OneAccount):
    """Drops the AMQP header and open a client pipelined behind its sasl-init (2.4.2)."""

    sasl_layer = DropsPipelinedSasl


class BypassableSasl(SaslServer):
    """Takes an AMQP frame where the sasl-init belongs for the end of the exchange: it passes on to proton, behind
    the AMQP header proton waits for, so the client gets a connection it never authenticated for."""

    def receive_data(self, data: bytes) -> SaslResult:
        """As the server's, but an AMQP frame (type 0) after the SASL header ends the exchange unauthenticated."""
        if self._header_seen and not self.done and data[5:6] == bytes([FRAME_TYPE_AMQP]):
            self.done = True
            return SaslResult(passthrough=AMQP_HEADER + data)
        return super().receive_data(data)


class OpensWithoutSaslInit(SwapsSaslLayer):
    """Lets a client that sends an open in the sasl-init's place skip authentication (5.3.2)."""

    sasl_layer = BypassableSasl


class LingeringSasl(SaslServer):
    """Refuses a login with its outcome but leaves the socket open."""

    def receive_data(self, data: bytes) -> SaslResult:
        """As the server's, but a refused exchange does not close the socket."""
        result = super().receive_data(data)
        if result.close and result.frames_out and result.frames_out[-1].performative == "sasl-outcome":
            result.close = False
        return result


class KeepsRefusedConnectionOpen(SwapsSaslLayer):
    """Answers a mechanism it did not offer with outcome auth but does not close the connection (5.3.3.2)."""

    sasl_layer = LingeringSasl


SASL_MUTANTS = tuple(Mutant(*fields, scope=SASL_SCOPE) for fields in (
    ("accepts-any-password", "has an account but takes any password with PLAIN",
     "5.3.3.6 auth: the supplied credentials are refused (core.sasl/wrong-password)", AcceptsAnyPassword),
    ("drops-pipelined-open", "drops the AMQP header and open pipelined behind the sasl-init",
     "2.4.2 pipelined open; 5.3.2 the AMQP header follows the outcome (core.sasl/pipelined-open)",
     DropsPipelinedOpen),
    ("opens-without-sasl-init", "gives a connection to a client that sends an open where its sasl-init belongs",
     "5.3.2 the client must initiate a SASL exchange (core.sasl/open-instead-of-init)", OpensWithoutSaslInit),
    ("keeps-refused-connection-open", "refuses a mechanism it did not offer but leaves the socket open",
     "5.3.3.2 an unsupported mechanism closes the connection (core.sasl/unoffered-mechanism)",
     KeepsRefusedConnectionOpen),
))

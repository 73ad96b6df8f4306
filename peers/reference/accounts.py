"""A reference broker built with one account: PLAIN takes only that user's password, and ANONYMOUS is not offered
(5.3.3.1: the server chooses the mechanisms it offers). The embedded launcher configures the broker with the
class's declared ``accounts``, connects the suite as that user and has the admin say the broker checks its
password, as a real broker's launcher does, so the SASL rows have a wrong password to try (core.sasl). The launcher
trusts what it configured, not what the built broker holds: a broker that loses its accounts is then caught.

A reference broker that verifies client certificates (:class:`ClientCertificate`) is served over TLS with a
throw-away PKI the launcher makes, and dialled with its client certificate: the suite then authenticates with SASL
EXTERNAL (RFC 4422 A), as the certificate's identity."""

from __future__ import annotations

from typing import Any

from .broker import Broker
from .router import Router

ACCOUNT = ("conformance", "conformance-account-password")
"""The one account's user and password: a test fixture's, shown in no report (frames are redacted at capture)."""


class OneAccount(Broker):
    """The reference broker with the one account :data:`ACCOUNT` (unless given users of its own)."""

    accounts: dict[str, str] = dict([ACCOUNT])  # what a launcher configures it with (fixtures/brokers.py)

    def __init__(self, users: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(users=users or dict(self.accounts), **kwargs)


class RouterOneAccount(OneAccount, Router):
    """The router mode of :class:`OneAccount`."""


class ClientCertificate(Broker):
    """The reference broker over TLS, verifying client certificates: it offers EXTERNAL first (5.3.3.1) to a client
    whose certificate it verified. ``client_certificate`` asks the embedded launcher for the PKI."""

    client_certificate = True  # what a launcher serves it with: amqps, a CA, a client certificate (fixtures/brokers.py)

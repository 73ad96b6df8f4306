"""TLS for ``amqps://``: the client and server contexts, and a sans-I/O server-side TLS layer.

TLS runs outside proton's engine (Python's ``ssl``), so the frames captured are the plaintext AMQP frames on
either side of the record layer: the frame log of a TLS run reads exactly as one over plain TCP. A client
certificate the server verified names the SASL EXTERNAL identity (its subject's common name).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Protocol

READ_SIZE = 65536


class TlsSetupError(ValueError):
    """A certificate, key or CA file cannot be used; the message names the file and what to do."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA to verify the other side by, and our own certificate and key (all optional)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """A client context: verifies the server against ``files.ca`` (or the system CAs); presents ``cert``."""
    try:
        context = ssl.create_default_context(cafile=files.ca)
        if files.cert:
            context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load TLS files ({_which(files)}): {exc}; check --ca, --cert and --key") \
            from None
    return context


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context presenting ``files.cert``/``key``; with ``files.ca``, client certificates are
    requested and verified against it (optional: a client without one can still use PLAIN or ANONYMOUS)."""
    if not files.cert:
        raise TlsSetupError("a TLS server needs a certificate: give --tls-cert (and --tls-key)")
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=files.ca)
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load TLS files ({_which(files)}): {exc}; check --tls-cert, --tls-key "
                            f"and --tls-ca") from None
    context.verify_mode = ssl.CERT_OPTIONAL if files.ca else ssl.CERT_NONE
    return context


def _which(files: TlsFiles) -> str:
    return ", ".join(f"{name}={value}" for name, value in vars(files).items() if value) or "none"


def common_name(certificate: dict[str, Any] | None) -> str | None:
    """The subject common name of a certificate as ``SSLObject.getpeercert()`` returns it."""
    for rdn in (certificate or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class Connection(Protocol):
    """What the reference server drives: a sans-I/O connection (``BrokerConnection``)."""

    engine: Any
    sasl: Any

    @property
    def done(self) -> bool: ...  # noqa: D102

    def receive_data(self, data: bytes) -> None: ...  # noqa: D102

    def receive_eof(self) -> None: ...  # noqa: D102

    def data_to_send(self) -> bytes: ...  # noqa: D102


class TlsServerConnection:
    """Server-side TLS in front of a connection, sans-I/O: ciphertext in and out, plaintext to ``inner``.

    Drive it exactly like the connection it wraps. After the handshake, a verified client certificate's
    common name becomes ``inner.sasl.external_user`` (SASL EXTERNAL). A failed handshake sets :attr:`failed`
    and the connection is ``done``.
    """

    def __init__(self, inner: Connection, context: ssl.SSLContext) -> None:
        self.inner = inner
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshaken = False
        self.failed: str | None = None
        self.plain_read = 0  # plaintext handed to the wrapped connection: the client's writes, as its socket counts
        self.plain_written = 0  # plaintext taken from the wrapped connection: the client's reads, once decrypted

    @property
    def engine(self) -> Any:
        """The wrapped connection's engine."""
        return self.inner.engine

    @property
    def done(self) -> bool:
        """True when nothing more will be read or written."""
        return (bool(self.failed) or self.inner.done) and not self._outgoing.pending

    def receive_data(self, data: bytes) -> None:
        """Ciphertext from the client: finish the handshake, then hand the plaintext on."""
        self._incoming.write(data)
        if not self.handshaken and not self._handshake():
            return
        while not self.failed:
            try:
                plain = self._tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLZeroReturnError:
                self.inner.receive_eof()
                return
            except ssl.SSLError as exc:
                self.failed = f"TLS error: {exc}"
                return
            if not plain:
                return
            self.plain_read += len(plain)
            self.inner.receive_data(plain)

    def _handshake(self) -> bool:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLError as exc:
            self.failed = f"TLS handshake failed: {exc}"
            return False
        self.handshaken = True
        user = common_name(self._tls.getpeercert())
        if user and hasattr(self.inner, "sasl"):
            self.inner.sasl.external_user = user
        return True

    def receive_eof(self) -> None:
        """The client closed the socket."""
        self.inner.receive_eof()

    def data_to_send(self) -> bytes:
        """Ciphertext to write: handshake records, then the wrapped connection's output encrypted."""
        if self.handshaken and not self.failed:
            plain = self.inner.data_to_send()
            if plain:
                self._tls.write(plain)
                self.plain_written += len(plain)
        return self._outgoing.read()

"""Broker URLs: parsing with clear errors, and redaction so a password never reaches any output."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from .tls import TlsFiles

SCHEMES = {"amqp": 5672, "amqps": 5671}


class BadUrl(ValueError):
    """A broker URL that cannot be used; the message says what is wrong and what a good one looks like."""


@dataclass(frozen=True)
class BrokerAddress:
    """Where a broker listens and how to authenticate. ``str()`` never shows the password."""

    host: str
    port: int
    scheme: str = "amqp"
    user: str | None = None
    password: str | None = None
    vhost: str | None = None
    tls: TlsFiles = field(default_factory=TlsFiles)  # amqps: CA to verify the broker by, client cert and key

    @property
    def url(self) -> str:
        """The URL with any password replaced by ``***``."""
        auth = ""
        if self.user is not None:
            auth = self.user + (":***" if self.password is not None else "") + "@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = f"/{self.vhost}" if self.vhost else ""
        return f"{self.scheme}://{auth}{host}:{self.port}{path}"

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"BrokerAddress({self.url!r})"


def parse_url(url: str) -> BrokerAddress:
    """Parse ``amqp[s]://[user[:password]@]host[:port][/vhost]``; raise :class:`BadUrl` naming the fault."""
    example = "expected amqp://[user[:password]@]host[:port], e.g. amqp://127.0.0.1:5672"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadUrl(f"bad broker URL {redact(url)!r}: {exc}; {example}") from None
    if parts.scheme not in SCHEMES:
        raise BadUrl(f"bad broker URL {redact(url)!r}: scheme {parts.scheme or '(none)'!r} is not amqp or amqps; "
                     f"{example}")
    if not parts.hostname:
        raise BadUrl(f"bad broker URL {redact(url)!r}: no host; {example}")
    if port == 0:
        raise BadUrl(f"bad broker URL {redact(url)!r}: port 0 is not a listening port; {example}")
    return BrokerAddress(
        host=parts.hostname,
        port=port or SCHEMES[parts.scheme],
        scheme=parts.scheme,
        user=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        vhost=parts.path.lstrip("/") or None,
    )


def redact(url: str) -> str:
    """The URL text with the password (if any) replaced by ``***``; works on URLs that do not parse too.

    Whatever precedes the last ``@`` is user information, and everything in it after the first ``:`` is
    masked: a password holding ``/`` or ``@`` is still hidden, and a mistyped URL cannot leak one into an
    error message. The price: an ``@`` in a vhost path over-masks (``amqp://h:***@c``), never under-masks.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" not in rest:
        return url
    userinfo, _, hostpart = rest.rpartition("@")
    prefix = ""
    if not sep and "/" in userinfo:  # "amqp:/user:pw@host": the credentials follow the last slash
        prefix, _, userinfo = userinfo.rpartition("/")
        prefix += "/"
    if ":" not in userinfo:
        return url
    masked = prefix + userinfo.split(":", 1)[0] + ":***@" + hostpart
    return f"{scheme}://{masked}" if sep else masked

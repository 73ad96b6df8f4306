"""Tests for amqp_conformance.peers.address: broker URL parsing and password redaction.

The amqp/amqps URL scheme and default ports (5672 plain, 5671 TLS) are those registered for AMQP
(IANA; AMQP 1.0 part 2.1 "Transport" names port 5672, part 5.2 "TLS" names 5671).
"""

from __future__ import annotations

import pytest
from amqp_conformance.peers.address import BadUrl, BrokerAddress, parse_url, redact

PASSWORD = "s3cr3t-pw"


@pytest.mark.parametrize(("url", "expected"), [
    ("amqp://localhost", BrokerAddress("localhost", 5672, "amqp")),
    ("amqps://localhost", BrokerAddress("localhost", 5671, "amqps")),
    ("amqp://127.0.0.1:5673", BrokerAddress("127.0.0.1", 5673, "amqp")),
    ("amqps://broker.example:1", BrokerAddress("broker.example", 1, "amqps")),
    ("amqp://h:65535", BrokerAddress("h", 65535, "amqp")),
    ("amqp://[::1]", BrokerAddress("::1", 5672, "amqp")),
    ("amqp://[::1]:5673", BrokerAddress("::1", 5673, "amqp")),
    ("amqp://guest@h", BrokerAddress("h", 5672, "amqp", user="guest")),
    ("amqp://guest:pw@h:1234", BrokerAddress("h", 1234, "amqp", user="guest", password="pw")),
    ("amqp://al%40ice:p%3As%2Fs%40w@h", BrokerAddress("h", 5672, "amqp", user="al@ice", password="p:s/s@w")),
    ("amqp://u:@h", BrokerAddress("h", 5672, "amqp", user="u", password="")),
    ("amqp://h/vhost1", BrokerAddress("h", 5672, "amqp", vhost="vhost1")),
    ("amqp://h/", BrokerAddress("h", 5672, "amqp")),
])
def test_parse_url_good(url, expected):
    assert parse_url(url) == expected


@pytest.mark.parametrize(("url", "problem"), [
    pytest.param("localhost:5672", "scheme 'localhost' is not amqp or amqps", id="no-scheme-host-port"),
    pytest.param("127.0.0.1:5672", "scheme '(none)' is not amqp or amqps", id="no-scheme-ip"),
    pytest.param("http://localhost:5672", "scheme 'http' is not amqp or amqps", id="http"),
    pytest.param("AMQP-over-http://h", "is not amqp or amqps", id="other-scheme"),
    pytest.param("amqp://", "no host", id="nothing-after-scheme"),
    pytest.param("amqp://:5672", "no host", id="port-but-no-host"),
    pytest.param("amqp://user:pw@:5672", "no host", id="user-but-no-host"),
    pytest.param("amqp://h:abc", "Port could not be cast to integer value as 'abc'", id="non-numeric-port"),
    pytest.param("amqp://h:65536", "Port out of range", id="port-too-high"),
    pytest.param("amqp://h:99999", "Port out of range", id="port-far-too-high"),
    pytest.param("amqp://h:0", "port 0 is not a listening port", id="port-0"),
])
def test_parse_url_bad(url, problem):
    with pytest.raises(BadUrl) as info:
        parse_url(url)
    message = str(info.value)
    assert problem in message
    assert "bad broker URL" in message
    assert "expected amqp://" in message  # says what a good one looks like
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("url", [
    f"amqp://alice:{PASSWORD}@h",
    f"amqps://alice:{PASSWORD}@h:5671/vhost",
    f"amqp://alice:{PASSWORD}@[::1]:5672",
    "amqp://alice:s3cr3t%2Dpw@h",  # percent-encoded; decodes to PASSWORD
])
def test_broker_address_text_never_contains_password(url):
    address = parse_url(url)
    assert address.password == PASSWORD
    for text in (str(address), repr(address), address.url, f"{address}", f"{address!r}"):
        assert PASSWORD not in text
        assert "alice:***@" in text


def test_broker_address_url_rendering():
    assert parse_url("amqp://[::1]").url == "amqp://[::1]:5672"
    assert parse_url("amqps://u@h/v").url == "amqps://u@h:5671/v"
    assert parse_url("amqp://u:p@h:1").url == "amqp://u:***@h:1"
    assert repr(parse_url("amqp://h")) == "BrokerAddress('amqp://h:5672')"


@pytest.mark.parametrize("url", [
    pytest.param(f"amqp://alice:{PASSWORD}@h:abc", id="bad-port"),
    pytest.param(f"amqp://alice:{PASSWORD}@h:0", id="port-0"),
    pytest.param(f"amqp://alice:{PASSWORD}@:5672", id="no-host"),
    pytest.param(f"http://alice:{PASSWORD}@h", id="http"),
    pytest.param(f"amqp://alice:{PASSWORD}@h:99999", id="port-out-of-range"),
    pytest.param(f"alice:{PASSWORD}@localhost:5672", id="no-scheme"),
    pytest.param(f"amqp:/alice:{PASSWORD}@localhost", id="one-slash"),
])
def test_bad_url_message_never_contains_password(url):
    with pytest.raises(BadUrl) as info:
        parse_url(url)
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(("url", "expected"), [
    pytest.param(f"amqp://alice:{PASSWORD}@h:5672", "amqp://alice:***@h:5672", id="good"),
    pytest.param(f"amqp://alice:{PASSWORD}@h:abc/v", "amqp://alice:***@h:abc/v", id="bad-port"),
    pytest.param(f"amqp://alice:{PASSWORD}@", "amqp://alice:***@", id="no-host"),
    pytest.param(f"weird://alice:{PASSWORD}@h", "weird://alice:***@h", id="other-scheme"),
    pytest.param(f"amqp://alice:p@ss@{PASSWORD}@h", "amqp://alice:***@h", id="at-in-password"),
    pytest.param("amqp://alice@h", "amqp://alice@h", id="user-no-password"),
    # an "@" in the path over-masks by design: a password may itself hold "/" (see redact's docstring)
    pytest.param("amqp://h:5672/a:b@c", "amqp://h:***@c", id="at-only-in-path"),
    pytest.param("amqp://u:pa/ss@h", "amqp://u:***@h", id="slash-in-password"),
    pytest.param("not a url", "not a url", id="no-authority"),
])
def test_redact(url, expected):
    assert redact(url) == expected


@pytest.mark.parametrize("url", [
    pytest.param(f"alice:{PASSWORD}@localhost:5672", id="no-scheme"),
    pytest.param(f"amqp:/alice:{PASSWORD}@localhost", id="one-slash"),
])
def test_redact_masks_password_without_scheme_separator(url):
    # A URL typed without "://" does not parse, which is exactly when it ends up in an error message.
    redacted = redact(url)
    assert PASSWORD not in redacted
    assert "alice" in redacted and "localhost" in redacted

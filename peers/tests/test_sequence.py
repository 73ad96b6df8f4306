"""Sequence numbers compared as AMQP 1.0 2.8.7 says (RFC 1982 serial arithmetic over 32 bits)."""

from __future__ import annotations

from amqp_conformance.peers.sequence import in_span, serial_difference, span, span_length


def test_a_range_across_the_wrap_holds_the_top_numbers_and_those_from_zero():
    assert span_length(4294967294, 1) == 4
    assert span(4294967294, 1) == [4294967294, 4294967295, 0, 1]
    assert in_span(0, 4294967294, 1) and in_span(4294967295, 4294967294, 1)
    assert not in_span(2, 4294967294, 1) and not in_span(4294967293, 4294967294, 1)


def test_a_range_without_the_wrap_is_the_plain_one():
    assert span(3, 5) == [3, 4, 5] and span_length(7, 7) == 1
    assert in_span(4, 3, 5) and not in_span(6, 3, 5)


def test_a_range_whose_last_comes_before_its_first_holds_nothing():
    assert span_length(5, 3) == 0 and span(5, 3) == [] and not in_span(4, 5, 3)


def test_a_listing_stops_at_its_limit():
    assert span(4294967295, 9, limit=3) == [4294967295, 0, 1]


def test_a_serial_difference_is_signed_and_counts_across_the_wrap():
    assert serial_difference(1, 4294967295) == 2
    assert serial_difference(4294967295, 1) == -2
    assert serial_difference(7, 7) == 0
    assert serial_difference(2 ** 31, 0) == -(2 ** 31)  # unordered (RFC 1982 3.2): not counted as later

"""Sequence numbers: AMQP 1.0 2.8.7 ``sequence-no``, a uint compared by RFC 1982 serial arithmetic over 32 bits.

Delivery-ids (2.6.12), transfer-ids and delivery-counts count on from 4294967295 to 0. A broker chooses where its
own start (its begin's next-outgoing-id, its attach's initial-delivery-count), so a range ``first..last`` of a
disposition may hold 4294967295 and 0 together; every test of a number against such a range goes through here.
"""

from __future__ import annotations

MODULUS = 2 ** 32
HALF = 2 ** 31  # RFC 1982 3.2: numbers this far apart or more are not ordered


def serial_difference(later: int, earlier: int) -> int:
    """``later`` less ``earlier`` in serial arithmetic (RFC 1982 over 32 bits): negative when ``later`` comes before
    ``earlier``; a distance of 2**31, which RFC 1982 leaves unordered, counts as negative."""
    distance = (later - earlier) % MODULUS
    return distance if distance < HALF else distance - MODULUS


def span_length(first: int, last: int) -> int:
    """How many numbers ``first..last`` holds, counting on from ``first`` (wrapping after 4294967295); 0 when
    ``last`` comes before ``first`` (a distance of 2**31 or more, which RFC 1982 leaves unordered)."""
    difference = serial_difference(last, first)
    return difference + 1 if difference >= 0 else 0


def in_span(number: int, first: int, last: int) -> bool:
    """Whether ``number`` is one of ``first..last`` (:func:`span_length`)."""
    return (number - first) % MODULUS < span_length(first, last)


def span(first: int, last: int, limit: int | None = None) -> list[int]:
    """The numbers of ``first..last`` in order (at most ``limit`` of them), wrapping after 4294967295."""
    count = span_length(first, last) if limit is None else min(limit, span_length(first, last))
    return [(first + offset) % MODULUS for offset in range(count)]

"""A delivery's transfers grouped as the receiver reassembles them (peers/transfers.py)."""

from __future__ import annotations

from amqp_conformance.peers.frames import Frame
from amqp_conformance.peers.transfers import DeliveryGrouping, came_settled, deliveries, payload_of


def transfer(handle: int, payload: bytes, channel: int = 0, direction: str = "in", **fields) -> Frame:
    return Frame(direction, channel, 0, "transfer", {"handle": handle, **fields}, payload, b"")


def test_a_delivery_goes_on_while_its_links_last_transfer_said_more_whatever_else_is_interleaved():
    frames = [transfer(0, b"a1", more=True, **{"delivery-id": 0}),
              transfer(1, b"b1", **{"delivery-id": 1}),  # another link's whole delivery, between
              transfer(0, b"a2", more=True, **{"delivery-id": 0}),  # proton repeats the delivery-id
              transfer(0, b"a3", channel=1, **{"delivery-id": 0}),  # the same handle on another session
              Frame("in", 0, 0, "flow", {"handle": 0}, b"", b""),
              transfer(0, b"a4"),  # no delivery-id: a continuation
              transfer(0, b"c1", **{"delivery-id": 2}),
              transfer(0, b"x", direction="out", **{"delivery-id": 0})]
    found = deliveries(frames, "in")
    assert [payload_of(d) for d in found] == [b"a1a2a4", b"b1", b"a3", b"c1"]
    assert [payload_of(d) for d in deliveries(frames, "out")] == [b"x"]


def test_an_aborted_transfer_ends_its_delivery_and_a_cut_short_one_is_kept_as_far_as_it_came():
    frames = [transfer(0, b"a1", more=True), transfer(0, b"", more=True, aborted=True),
              transfer(0, b"b1", more=True)]
    assert [payload_of(d) for d in deliveries(frames, "in")] == [b"a1", b"b1"]


def test_a_delivery_came_settled_when_any_of_its_transfers_settled_it():
    assert came_settled([transfer(0, b"", more=True, settled=None), transfer(0, b"", settled=True)])
    assert not came_settled([transfer(0, b"", more=True, settled=False), transfer(0, b"")])


def test_a_grouping_fed_a_growing_capture_finds_what_deliveries_finds_in_the_whole_wherever_it_is_read():
    whole = [transfer(0, b"a1", more=True, **{"delivery-id": 0}),
             transfer(1, b"b1", **{"delivery-id": 1}),
             transfer(0, b"a2", more=True),
             Frame("in", 0, 0, "disposition", {"role": True, "first": 1}, b"", b""),
             transfer(0, b"a3"),
             transfer(0, b"c1", more=True, **{"delivery-id": 2}),
             transfer(0, b"", more=True, aborted=True),
             transfer(0, b"d1", **{"delivery-id": 3}),
             transfer(0, b"x", direction="out", **{"delivery-id": 0})]
    expected = [payload_of(d) for d in deliveries(whole, "in")]
    assert expected == [b"a1a2a3", b"b1", b"c1", b"d1"]
    for first_read in range(len(whole) + 1):
        for second_read in range(first_read, len(whole) + 1):
            capture: list[Frame] = []
            grouping = DeliveryGrouping("in")
            for read_at in (first_read, second_read, len(whole)):
                capture.extend(whole[len(capture):read_at])
                found = grouping.update(capture)
                assert [payload_of(d) for d in found] == [payload_of(d) for d in deliveries(capture, "in")]
            assert [payload_of(d) for d in found] == expected
    assert grouping.update(capture) is found and [payload_of(d) for d in found] == expected  # read again: the same

"""The broker's flow state for its sending links, reckoned from one connection's frames (reference/stated_flow)."""

from __future__ import annotations

from amqp_conformance.peers.frames import Frame, FrameSplitter, described, encode_frame
from amqp_conformance.peers.reference.stated_flow import SenderFlowStates
from proton import uint

NEAR_WRAP = 2 ** 32 - 1


def _frame(direction: str, channel: int, performative: str, /, **fields) -> Frame:
    """A frame as the capture decodes it (``direction`` "out": the broker's)."""
    return FrameSplitter(direction).feed(encode_frame(described(performative, **fields), channel=channel))[0]


def _decoded(data: bytes) -> Frame:
    return FrameSplitter("out").feed(data)[0]


def _states(*frames: Frame) -> SenderFlowStates:
    states = SenderFlowStates()
    for frame in frames:
        states.note(frame)
    return states


SESSION = (
    _frame("in", 0, "begin", next_outgoing_id=uint(7), incoming_window=uint(100), outgoing_window=uint(100)),
    _frame("out", 2, "begin", remote_channel=0, next_outgoing_id=uint(NEAR_WRAP), incoming_window=uint(10),
           outgoing_window=uint(50)),
    _frame("in", 0, "attach", name="L", handle=uint(5), role=True),
    _frame("out", 2, "attach", name="L", handle=uint(9), role=False, initial_delivery_count=uint(NEAR_WRAP)),
)


def _flow(credit: int, count: int | None = NEAR_WRAP, drain: bool = False, handle: int = 5) -> Frame:
    return _frame("in", 0, "flow", next_incoming_id=uint(NEAR_WRAP), incoming_window=uint(100),
                  next_outgoing_id=uint(7), outgoing_window=uint(100), handle=uint(handle),
                  delivery_count=None if count is None else uint(count), link_credit=uint(credit), drain=drain)


def _transfer(more: bool = False) -> Frame:
    return _frame("out", 2, "transfer", handle=uint(9), delivery_id=uint(0), delivery_tag=b"t", more=more)


def test_the_state_before_the_first_credit_is_none_left_and_the_initial_count_on_the_brokers_channel():
    stated = _decoded(_states(*SESSION).flow_before(_flow(3)))
    assert stated.channel == 2 and stated.performative == "flow"
    assert {k: stated.fields[k] for k in ("handle", "delivery-count", "link-credit", "drain")} == {
        "handle": 9, "delivery-count": NEAR_WRAP, "link-credit": 0, "drain": False}
    assert (stated.fields["next-incoming-id"], stated.fields["incoming-window"]) == (7, 10)
    assert (stated.fields["next-outgoing-id"], stated.fields["outgoing-window"]) == (NEAR_WRAP, 50)


def test_deliveries_spend_the_credit_across_the_wrap_and_a_delivery_in_two_frames_counts_once():
    states = _states(*SESSION, _flow(3, drain=True), _transfer(more=True), _transfer(), _transfer(),
                     _frame("in", 0, "transfer", handle=uint(4), delivery_id=uint(7), delivery_tag=b"p"))
    stated = _decoded(states.flow_before(_flow(2, count=1)))
    # two deliveries (three frames): one credit left, the count past the wrap, drain as we last set it
    assert (stated.fields["delivery-count"], stated.fields["link-credit"], stated.fields["drain"]) == (1, 1, True)
    assert stated.fields["next-outgoing-id"] == 2  # three transfer frames from 4294967295
    assert (stated.fields["next-incoming-id"], stated.fields["incoming-window"]) == (8, 9)  # our one transfer read


def test_a_count_the_receiver_left_out_is_the_initial_one_and_the_brokers_own_flow_restates_its_count():
    states = _states(*SESSION, _transfer(), _flow(2, count=None))
    assert _decoded(states.flow_before(_flow(0))).fields["link-credit"] == 1  # from the initial: one of two spent
    answered = _states(*SESSION, _flow(2), _frame("out", 2, "flow", next_incoming_id=uint(7),
                                                 incoming_window=uint(20), next_outgoing_id=uint(NEAR_WRAP),
                                                 outgoing_window=uint(50), handle=uint(9), delivery_count=uint(1),
                                                 link_credit=uint(0), drain=True))
    stated = _decoded(answered.flow_before(_flow(0)))
    assert (stated.fields["delivery-count"], stated.fields["link-credit"], stated.fields["incoming-window"]) == (
        1, 0, 20)


def test_no_state_for_a_link_the_broker_receives_on_one_not_attached_or_detached_or_a_session_flow():
    assert _states(*SESSION[:3]).flow_before(_flow(1)) is None  # its attach not written yet
    assert _states(*SESSION).flow_before(_flow(1, handle=6)) is None
    detached = _states(*SESSION, _frame("out", 2, "detach", handle=uint(9), closed=True))
    assert detached.flow_before(_flow(1)) is None
    session_flow = _frame("in", 0, "flow", next_incoming_id=uint(0), incoming_window=uint(100),
                          next_outgoing_id=uint(7), outgoing_window=uint(100))
    assert _states(*SESSION).flow_before(session_flow) is None
    assert _states(*SESSION).flow_before(_transfer()) is None

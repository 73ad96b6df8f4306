"""Every raw frame a core.errors row sends is well-formed except for the field(s) the row is about (``subject``).

A row about one bad field must not break another by accident: a broker that chokes on the accidental fault
would be judged on the wrong thing (the raw sender attach once lacked initial-delivery-count, 2.7.3, and a
broker crashing on that was excused while it silently accepted what the row is about). Each frame is built
as the scenario builds it and decoded by the splitter (proton's codec), then checked against the
specification's mandatory fields (2.7, "mandatory=true"), a sender's initial-delivery-count (2.7.3), the
first transfer's delivery-id and delivery-tag (2.7.5) and each field's type (2.7, 2.8), except in ``subject``.
Frames made to break the framing itself (raw bytes, a body given as hex, a lying size or doff, padding, a
cut body, another frame type) are about the frame, not a field, and are only checked where they still decode.
"""

from __future__ import annotations

import re

import pytest
from amqp_conformance.conformance.catalogue import load_catalogue
from amqp_conformance.conformance.scripts_errors import LINKED_SETUPS
from amqp_conformance.peers.amqp_types import PERFORMATIVES
from amqp_conformance.peers.frames import Frame, FrameSplitter, FramingError, described, encode_frame
from amqp_conformance.peers.rawframes import RawContext, frame_bytes
from amqp_conformance.peers.wire_types import frame_problems
from proton import uint

RAW_TABLE = "core.errors"


def problems(frame: Frame, continuation: bool) -> list[str]:
    """Why a decoded frame is not well-formed, field by field (empty when it is): a field's type at any depth, a
    mandatory field left null (:func:`..wire_types.frame_problems`), a sender's attach without
    initial-delivery-count, a first transfer without delivery-id or delivery-tag."""
    fields = frame.fields
    found = frame_problems(frame)
    if frame.performative == "attach" and fields.get("role") == "sender" and \
            fields.get("initial-delivery-count") is None:
        found.append("attach.initial-delivery-count must be set by a sender (2.7.3)")
    if frame.performative == "transfer" and not continuation:
        found += [f"transfer.{name} must be given on a delivery's first transfer (2.7.5)"
                  for name in ("delivery-id", "delivery-tag") if fields.get(name) is None]
    return found


def top_field(problem: str) -> str:
    """The performative's field a problem is about (``state`` for ``disposition.state.error is ...``)."""
    return re.split(r"[.\[ ]", problem)[1]


def _frames_of(case) -> list[tuple[dict, list]]:
    raw = RawContext(limits={"max-frame-size": 512, "channel-max": 3, "handle-max": 7}, credit=1,
                     link_name="link" if case.given.get("setup") in LINKED_SETUPS else "")
    built = []
    for spec in case.given["frames"]:
        splitter = FrameSplitter("out", size_limit=1 << 30)
        try:
            frames = splitter.feed(frame_bytes(spec, raw))
        except FramingError:
            frames = []  # the frame breaks the framing on purpose: no field to judge
        built.append((spec, frames))
    return built


CASES = [c for c in load_catalogue().cases if c.table == RAW_TABLE]


@pytest.mark.parametrize("case", CASES, ids=[c.row for c in CASES])
def test_every_raw_frame_is_well_formed_but_its_subject(case):
    found = []
    in_delivery: set[int] = set()  # handles with a multi-frame delivery in progress
    for spec, frames in _frames_of(case):
        subject = set(spec.get("subject", ()))
        for frame in frames:
            if frame.performative not in PERFORMATIVES:
                continue  # a header, an empty frame, or a body that is the row's subject
            handle = frame.fields.get("handle")
            continuation = frame.performative == "transfer" and handle in in_delivery
            if frame.performative == "transfer":
                (in_delivery.add if frame.fields.get("more") else in_delivery.discard)(handle)
            found += [p for p in problems(frame, continuation) if top_field(p) not in subject]
    assert not found, f"{case.id}: frames malformed beyond the row's subject: {found}"


def test_subject_names_fields_of_the_frame():
    """A subject names fields of its frame's performative (a typo would exempt nothing, silently)."""
    from amqp_conformance.peers.amqp_types import BY_NAME

    wrong = [(c.id, name) for c in CASES for spec in c.given["frames"] for name in spec.get("subject", ())
             if "performative" not in spec or name not in BY_NAME[spec["performative"]].fields]
    assert not wrong


def test_the_check_can_fail():
    """A sender attach without initial-delivery-count, a transfer without its tag, an ill-typed handle, a state's
    field ill-typed (a subject of ``state`` exempts that one)."""
    def frame(performative: str, /, **fields: object) -> Frame:
        return FrameSplitter("out").feed(encode_frame(described(performative, **fields)))[0]

    assert problems(frame("attach", name="l", handle=uint(0), role=False), False) == [
        "attach.initial-delivery-count must be set by a sender (2.7.3)"]
    assert "transfer.delivery-tag must be given on a delivery's first transfer (2.7.5)" in \
        problems(frame("transfer", handle=uint(0), **{"delivery-id": uint(0)}), False)
    assert problems(frame("detach", handle="0"), False) == ["detach.handle is a string, not uint (2.7.7)"]
    state = described("modified", **{"message-annotations": ["x"]})
    found = problems(frame("disposition", role=True, first=uint(0), state=state), False)
    assert found == ["disposition.state.message-annotations is a list, not fields (3.4.5)"]
    assert top_field(found[0]) == "state"

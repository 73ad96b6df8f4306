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

import pytest
from amqp_conformance.conformance.catalogue import load_catalogue
from amqp_conformance.conformance.scripts_errors import LINKED_SETUPS
from amqp_conformance.peers.frames import FrameSplitter, FramingError
from amqp_conformance.peers.rawframes import FIELD_TYPES, RawContext, frame_bytes
from proton import Data

# AMQP 1.0 2.7 (and 5.3.3.2 sasl-init): the fields each performative marks mandatory=true
MANDATORY = {
    "open": ("container-id",), "begin": ("next-outgoing-id", "incoming-window", "outgoing-window"),
    "attach": ("name", "handle", "role"), "flow": ("incoming-window", "next-outgoing-id", "outgoing-window"),
    "transfer": ("handle",), "disposition": ("role", "first"), "detach": ("handle",), "end": (), "close": (),
    "sasl-init": ("mechanism",),
}
# proton.Data's type codes for each field type of rawframes.FIELD_TYPES (a multiple symbol may be an array)
TYPE_CODES = {
    "uint": {Data.UINT}, "ulong": {Data.ULONG}, "ushort": {Data.USHORT}, "ubyte": {Data.UBYTE},
    "bool": {Data.BOOL}, "string": {Data.STRING}, "symbol": {Data.SYMBOL, Data.ARRAY}, "binary": {Data.BINARY},
    "fields": {Data.MAP}, "map": {Data.MAP},
}
DESCRIBED = {"source": "target", "target": "target", "state": "state", "error": "error"}
RAW_TABLE = "core.errors"


def problems(performative: str, fields: dict, types: tuple[int, ...], continuation: bool) -> list[str]:
    """Why a decoded frame is not well-formed, field by field (empty when it is)."""
    from amqp_conformance.peers.amqp_types import BY_NAME

    names = BY_NAME[performative].fields
    kind = {name: (types[i] if i < len(types) else Data.NULL) for i, name in enumerate(names)}
    found = [f"{performative}.{name} is mandatory (2.7)" for name in MANDATORY.get(performative, ())
             if kind[name] == Data.NULL]
    if performative == "attach" and fields.get("role") == "sender" and kind["initial-delivery-count"] == Data.NULL:
        found.append("attach.initial-delivery-count must be set by a sender (2.7.3)")
    if performative == "transfer" and not continuation:
        found += [f"transfer.{name} must be given on a delivery's first transfer (2.7.5)"
                  for name in ("delivery-id", "delivery-tag") if kind[name] == Data.NULL]
    for name in names:
        if kind[name] == Data.NULL:
            continue
        if name in DESCRIBED:
            if kind[name] != Data.DESCRIBED:
                found.append(f"{performative}.{name} is encoded as {Data.type_names[kind[name]]}, not described")
        elif FIELD_TYPES.get(name) in TYPE_CODES and kind[name] not in TYPE_CODES[FIELD_TYPES[name]]:
            found.append(f"{performative}.{name} is encoded as {Data.type_names[kind[name]]}, "
                         f"not {FIELD_TYPES[name]}")
    return found


def _frames_of(case) -> list[tuple[dict, list]]:
    raw = RawContext(limits={"max-frame-size": 512, "channel-max": 3, "handle-max": 7}, credit=1,
                     link_name="link" if case.given.get("setup") in LINKED_SETUPS else "")
    built = []
    for spec in case.given["frames"]:
        splitter = FrameSplitter("out", size_limit=1 << 30, field_types=True)
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
            if frame.field_types is None or frame.performative not in MANDATORY:
                continue  # a header, an empty frame, or a body that is the row's subject
            handle = frame.fields.get("handle")
            continuation = frame.performative == "transfer" and handle in in_delivery
            if frame.performative == "transfer":
                (in_delivery.add if frame.fields.get("more") else in_delivery.discard)(handle)
            found += [p for p in problems(frame.performative, frame.fields, frame.field_types, continuation)
                      if p.split(" ")[0].split(".", 1)[1] not in subject]
    assert not found, f"{case.id}: frames malformed beyond the row's subject: {found}"


def test_subject_names_fields_of_the_frame():
    """A subject names fields of its frame's performative (a typo would exempt nothing, silently)."""
    from amqp_conformance.peers.amqp_types import BY_NAME

    wrong = [(c.id, name) for c in CASES for spec in c.given["frames"] for name in spec.get("subject", ())
             if "performative" not in spec or name not in BY_NAME[spec["performative"]].fields]
    assert not wrong


def test_the_check_can_fail():
    """A sender attach without initial-delivery-count, a transfer without its tag, an ill-typed handle."""
    assert problems("attach", {"role": "sender"}, (Data.STRING, Data.UINT, Data.BOOL), False) == [
        "attach.initial-delivery-count must be set by a sender (2.7.3)"]
    assert "transfer.delivery-tag must be given on a delivery's first transfer (2.7.5)" in \
        problems("transfer", {}, (Data.UINT, Data.UINT), False)
    assert problems("detach", {}, (Data.STRING,), False) == ["detach.handle is encoded as string, not uint"]

"""A hostile broker cannot crash or hang the peer's frame splitter and decoder (hypothesis).

Whatever bytes arrive, split however the network splits them: the splitter returns frames or raises
FramingError carrying the offending bytes, and once broken stays broken; ``decode_body`` never raises
(a body it cannot read is an "undecodable" frame, evidence rather than a crash).
"""

from __future__ import annotations

import struct

import pytest
from amqp_conformance.peers.frames import (
    AMQP_HEADER,
    DEFAULT_SIZE_LIMIT,
    FrameSplitter,
    FramingError,
    decode_body,
    described,
    encode_frame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GOOD = [AMQP_HEADER,
        encode_frame(described("open", container_id="c")),
        encode_frame(described("begin", next_outgoing_id=0, incoming_window=10, outgoing_window=10), channel=1),
        encode_frame(described("disposition", role=True, first=0, settled=True)),
        encode_frame(b"")]


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[list, FramingError | None]:
    splitter = FrameSplitter("in")
    frames, error = [], None
    points = sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]
    start = 0
    for point in points:
        try:
            frames += splitter.feed(data[start:point])
        except FramingError as exc:
            error = exc
            break
        start = point
    return frames, error


@SETTINGS
@given(st.binary(max_size=2048), st.lists(st.integers(min_value=0, max_value=4096), max_size=12))
def test_garbage_in_any_pieces_gives_frames_or_a_framing_error(data, cuts):
    frames, error = feed_in_pieces(data, cuts)
    for frame in frames:
        assert frame.raw and isinstance(frame.performative, str)
    if error is not None:
        assert error.offending and str(error).startswith("invalid frame header")


@SETTINGS
@given(st.binary(max_size=2048), st.lists(st.integers(min_value=0, max_value=4096), max_size=12))
def test_how_the_stream_is_split_does_not_change_what_it_means(data, cuts):
    whole_frames, whole_error = feed_in_pieces(data, [])
    split_frames, split_error = feed_in_pieces(data, cuts)
    assert [f.raw for f in split_frames] == [f.raw for f in whole_frames]
    assert (split_error is None) == (whole_error is None)


@SETTINGS
@given(st.lists(st.sampled_from(GOOD), min_size=1, max_size=6), st.integers(min_value=1, max_value=200))
def test_valid_frames_cut_anywhere_come_out_whole_once_the_rest_arrives(frames, cut):
    stream = b"".join(frames)
    prefix = stream[:-cut] if cut < len(stream) else b""
    splitter = FrameSplitter("in")
    got = splitter.feed(prefix)
    whole, ends = [], 0
    for frame in frames:  # the frames wholly inside the prefix, and only those, come out
        if ends + len(frame) > len(prefix):
            break
        whole.append(frame)
        ends += len(frame)
    assert [f.raw for f in got] == whole
    assert splitter.buffered == len(prefix) - ends  # a truncated frame waits for the rest, never misparsed
    rest = splitter.feed(stream[len(prefix):])
    assert [f.raw for f in got + rest] == frames and splitter.buffered == 0


# After valid frames, a tail is either garbage (a frame header no frame can have) or the start of a frame.
GARBAGE = struct.pack(">IBBH", 4, 2, 0, 0) + b"junk"  # size 4 < 8
TRUNCATED = GOOD[1][:-1]  # an open frame one byte short


def test_a_garbage_tail_after_valid_frames_is_a_framing_error_naming_its_bytes():
    splitter = FrameSplitter("in")
    assert [f.raw for f in splitter.feed(b"".join(GOOD))] == GOOD
    with pytest.raises(FramingError, match="invalid frame header: size=4 doff=2") as caught:
        splitter.feed(GARBAGE)
    assert caught.value.offending == GARBAGE


def test_a_truncated_tail_after_valid_frames_waits_for_its_last_byte():
    splitter = FrameSplitter("in")
    assert [f.raw for f in splitter.feed(b"".join(GOOD) + TRUNCATED)] == GOOD
    assert splitter.buffered == len(TRUNCATED)
    assert [f.raw for f in splitter.feed(GOOD[1][-1:])] == [GOOD[1]] and splitter.buffered == 0


@SETTINGS
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=0, max_value=255),
       st.binary(max_size=32))
def test_sizes_out_of_range_are_framing_errors_and_the_splitter_stays_broken(size, doff, rest):
    header = struct.pack(">IBBH", size, doff, 0, 0)
    splitter = FrameSplitter("in")
    valid = 8 <= size <= DEFAULT_SIZE_LIMIT and doff >= 2 and doff * 4 <= size
    if header[:4] == b"AMQP":
        return  # a protocol header, not a frame header
    try:
        splitter.feed(header + rest)
    except FramingError as exc:
        assert not valid
        assert exc.offending.startswith(header)
        try:
            splitter.feed(b"anything")
        except FramingError:
            pass
        else:
            raise AssertionError("a broken splitter accepted more bytes")
    else:
        assert valid


@SETTINGS
@given(st.binary(max_size=4096))
def test_decode_body_never_raises(body):
    name, fields, payload = decode_body(body)
    assert isinstance(name, str) and isinstance(fields, dict) and isinstance(payload, bytes)
    if name == "undecodable":
        assert "error" in fields


def test_an_oversized_frame_header_is_refused_before_any_buffering():
    splitter = FrameSplitter("in", size_limit=1024)
    try:
        splitter.feed(struct.pack(">IBBH", 1025, 2, 0, 0))
    except FramingError as exc:
        assert "size=1025" in str(exc)
    else:
        raise AssertionError("an oversized frame was buffered")

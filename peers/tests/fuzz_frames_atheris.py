"""Coverage-guided fuzzing of the frame splitter and decoder with atheris (libFuzzer).

Run: ``python peers/tests/fuzz_frames_atheris.py -runs=100000`` (any libFuzzer option works; ``-max_total_time=60``).
The target feeds the input, cut at points drawn from the input itself, to a FrameSplitter and every body to
decode_body: the only exception allowed is FramingError, and a broken splitter must stay broken.
Not collected by pytest (no ``test_`` prefix); ``test_self_atheris.py`` runs it briefly when atheris is installed.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from amqp_conformance.peers.frames import FrameSplitter, FramingError, decode_body


def one_input(data: bytes) -> None:
    """libFuzzer's entry point: split ``data`` into pieces and frames; only FramingError may escape."""
    fdp = atheris.FuzzedDataProvider(data)
    cuts = sorted(fdp.ConsumeIntInRange(0, 64) for _ in range(fdp.ConsumeIntInRange(0, 6)))
    stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    splitter = FrameSplitter("in", size_limit=1 << 16)
    start = 0
    for point in [*cuts, len(stream)]:
        try:
            for frame in splitter.feed(stream[start:point]):
                assert frame.raw
        except FramingError as exc:
            assert exc.offending
            try:
                splitter.feed(b"x")
            except FramingError:
                break
            raise AssertionError("a broken splitter accepted more bytes") from None
        start = max(start, point)
    decode_body(stream)


def main() -> None:
    """Run the fuzzer with libFuzzer's command-line options."""
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

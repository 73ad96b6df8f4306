"""Tests for amqp_conformance.peers.matching (the pattern language) and the state helpers in peers.states."""

from __future__ import annotations

import pytest
from amqp_conformance.peers.frames import FrameSplitter, described, encode_frame
from amqp_conformance.peers.matching import matches, mismatches, validate_pattern
from amqp_conformance.peers.states import Accepted, Error, Modified, Rejected, Released
from proton import byte, char, float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort

ACCEPTED = {"@type": "accepted"}
DISPOSITION = {"role": "receiver", "first": 0, "last": None, "settled": True, "state": ACCEPTED}

MATCHING = [
    # dict subset: keys the pattern does not name are not judged
    pytest.param({}, DISPOSITION, id="empty-dict-matches-any-dict"),
    pytest.param({"settled": True}, DISPOSITION, id="dict-subset"),
    pytest.param({"state": {"@type": "accepted"}, "first": 0}, DISPOSITION, id="nested-subset"),
    # None = absent or null
    pytest.param({"last": None}, DISPOSITION, id="none-matches-null"),
    pytest.param({"batchable": None}, DISPOSITION, id="none-matches-missing-key"),
    pytest.param(None, None, id="none-matches-none"),
    # @regex on str and bytes (full match)
    pytest.param({"@regex": "amqp:.*"}, "amqp:not-found", id="regex-str"),
    pytest.param({"@regex": "t[a-z]g"}, b"tag", id="regex-bytes"),
    pytest.param({"c": {"@regex": "x|y"}}, {"c": "y"}, id="regex-nested"),
    # @present
    pytest.param({"first": {"@present": True}}, DISPOSITION, id="present-true-value"),
    pytest.param({"first": {"@present": True}}, {"first": 0}, id="present-true-zero-is-a-value"),
    pytest.param({"first": {"@present": True}}, {"first": False}, id="present-true-false-is-a-value"),
    pytest.param({"last": {"@present": False}}, DISPOSITION, id="present-false-null"),
    pytest.param({"batchable": {"@present": False}}, DISPOSITION, id="present-false-missing"),
    # @at-least: a number no smaller than the bound
    pytest.param({"@at-least": 1}, 1, id="at-least-equal"),
    pytest.param({"@at-least": 1}, 656, id="at-least-above"),
    pytest.param({"@at-least": 0}, uint(0), id="at-least-typed-int"),
    pytest.param({"@at-least": 1.5}, 2.0, id="at-least-float"),
    # @one-of
    pytest.param({"@one-of": [{"@type": "released"}, {"@type": "accepted"}]}, ACCEPTED, id="one-of-second"),
    pytest.param({"@one-of": [None, 0]}, None, id="one-of-none"),
    # @includes: in order, others allowed anywhere
    pytest.param({"@includes": [{"p": "end"}]}, [{"p": "end"}, {"p": "close"}], id="includes-first-of-two"),
    pytest.param({"@includes": [{"p": "close"}]}, [{"p": "end"}, {"p": "close"}], id="includes-last-of-two"),
    pytest.param({"@includes": [1, 3]}, [0, 1, 2, 3, 4], id="includes-with-gaps"),
    pytest.param({"@includes": [{"@regex": "a.*"}, "ab"]}, ["ab", "ab"], id="includes-earliest-leaves-room"),
    pytest.param({"@includes": []}, [], id="includes-nothing-in-empty"),
    # @each: one element or more, every one matching
    pytest.param({"@each": {"@regex": "(delivery [0-9]+: )?late"}}, ["late", "delivery 2: late"], id="each-of-two"),
    pytest.param({"@each": 1}, [1], id="each-of-one"),
    # @symbol-keys: a map keyed by symbols (3.4.5 fields, 3.2.10 annotations), its entries matched as a map's
    pytest.param({"@symbol-keys": {"x-opt-a": "v"}}, {symbol("x-opt-a"): "v", symbol("x-opt-b"): 1},
                 id="symbol-keys"),
    pytest.param({"@symbol-keys": {}}, {}, id="symbol-keys-empty-map"),
    # lists
    pytest.param([1, "a"], [1, "a"], id="list-equal"),
    pytest.param([{"@type": "accepted"}], [{"@type": "accepted", "x": 1}], id="list-of-subsets"),
    pytest.param([], [], id="empty-list"),
    # scalars
    pytest.param("PLAIN", "PLAIN", id="str"),
    pytest.param("tag", b"tag", id="str-matches-utf8-bytes"),
    pytest.param(True, True, id="bool"),
    pytest.param(0, 0, id="int"),
    pytest.param(1.5, 1.5, id="float"),
    # AMQP types (1.6): proton.Data keeps them, a type operator requires them
    pytest.param({"@symbol": "amqp:not-found"}, symbol("amqp:not-found"), id="symbol"),
    pytest.param({"@string": "why"}, "why", id="string"),
    pytest.param({"@char": "x"}, char("x"), id="char"),
    pytest.param({"@binary": "0:1"}, b"0:1", id="binary"),
    pytest.param({"@boolean": False}, False, id="boolean"),
    pytest.param({"@ubyte": 1}, ubyte(1), id="ubyte"),
    pytest.param({"@ushort": 1}, ushort(1), id="ushort"),
    pytest.param({"@uint": 0}, uint(0), id="uint"),
    pytest.param({"@ulong": 7}, ulong(7), id="ulong"),
    pytest.param({"@byte": -1}, byte(-1), id="byte"),
    pytest.param({"@short": -1}, short(-1), id="short"),
    pytest.param({"@int": -1}, int32(-1), id="int"),
    pytest.param({"@long": -1}, -1, id="long"),
    pytest.param({"@timestamp": 5}, timestamp(5), id="timestamp"),
    pytest.param({"@float": 1.5}, float32(1.5), id="float32"),
    pytest.param({"@double": 1.5}, 1.5, id="double"),
    pytest.param({"@uint": {"@present": True}}, uint(9), id="type-with-any-value"),
    pytest.param({"@symbol": {"@regex": "amqp:.*"}}, symbol("amqp:x"), id="type-with-nested-pattern"),
    pytest.param({"error": {"condition": {"@symbol": "amqp:x"}}}, {"error": {"condition": symbol("amqp:x")}},
                 id="type-nested-in-dict"),
    pytest.param("amqp:x", symbol("amqp:x"), id="untyped-str-matches-symbol"),
    pytest.param(0, uint(0), id="untyped-int-matches-uint"),
]

NOT_MATCHING = [
    pytest.param({"settled": False}, DISPOSITION, id="dict-value-differs"),
    pytest.param({"settled": True}, None, id="dict-vs-none"),
    pytest.param({"settled": True}, [True], id="dict-vs-list"),
    pytest.param({"last": None}, {"last": 3}, id="none-vs-value"),
    pytest.param(None, 0, id="none-vs-zero"),
    pytest.param(None, False, id="none-vs-false"),
    pytest.param({"missing": 0}, DISPOSITION, id="value-vs-missing-key"),
    pytest.param({"@regex": "amqp"}, "amqp:not-found", id="regex-is-full-match"),
    pytest.param({"@regex": "t[a-z]g"}, b"TAG", id="regex-bytes-differ"),
    pytest.param({"@regex": "1"}, 1, id="regex-vs-int"),
    pytest.param({"@regex": ".*"}, None, id="regex-vs-none"),
    pytest.param({"first": {"@present": True}}, {"first": None}, id="present-true-null"),
    pytest.param({"first": {"@present": True}}, {}, id="present-true-missing"),
    pytest.param({"first": {"@present": False}}, {"first": 0}, id="present-false-value"),
    pytest.param({"@at-least": 1}, 0, id="at-least-below"),
    pytest.param({"@at-least": 0}, None, id="at-least-vs-none"),
    pytest.param({"@at-least": 0}, True, id="at-least-vs-bool"),
    pytest.param({"@at-least": 0}, "5", id="at-least-vs-str"),
    pytest.param({"@one-of": [{"@type": "released"}, {"@type": "rejected"}]}, ACCEPTED, id="one-of-none-match"),
    pytest.param({"@one-of": []}, ACCEPTED, id="one-of-empty"),
    pytest.param({"@includes": [{"p": "end"}]}, [{"p": "close"}], id="includes-absent"),
    pytest.param({"@includes": [3, 1]}, [1, 2, 3], id="includes-out-of-order"),
    pytest.param({"@includes": [1, 1]}, [1], id="includes-one-element-twice"),
    pytest.param({"@includes": []}, None, id="includes-vs-none"),
    pytest.param({"@includes": [1]}, (1,), id="includes-vs-tuple"),
    pytest.param({"@each": {"@regex": "late"}}, ["late", "early"], id="each-one-other"),
    pytest.param({"@each": 1}, [], id="each-of-none"),
    pytest.param({"@each": 1}, None, id="each-vs-none"),
    pytest.param({"@each": 1}, 1, id="each-vs-scalar"),
    pytest.param({"@symbol-keys": {"x-opt-a": "v"}}, {"x-opt-a": "v"}, id="symbol-keys-string-key"),
    pytest.param({"@symbol-keys": {}}, {symbol("x-opt-a"): 1, ulong(1): 2}, id="symbol-keys-ulong-key"),
    pytest.param({"@symbol-keys": {"x-opt-a": "v"}}, {symbol("x-opt-a"): "w"}, id="symbol-keys-entry-differs"),
    pytest.param({"@symbol-keys": {}}, None, id="symbol-keys-vs-none"),
    pytest.param({"@symbol-keys": {}}, [], id="symbol-keys-vs-list"),
    pytest.param([1, 2], [1], id="list-too-short"),
    pytest.param([1], [1, 2], id="list-too-long"),
    pytest.param([1, 2], [1, 3], id="list-element-differs"),
    pytest.param([1], (1,), id="list-vs-tuple"),
    pytest.param([], None, id="list-vs-none"),
    # bool vs int: True must not match 1, False must not match 0, either way round
    pytest.param(True, 1, id="true-vs-1"),
    pytest.param(1, True, id="1-vs-true"),
    pytest.param(False, 0, id="false-vs-0"),
    pytest.param(0, False, id="0-vs-false"),
    pytest.param({"settled": 1}, DISPOSITION, id="nested-1-vs-true"),
    pytest.param("1", 1, id="str-vs-int"),
    pytest.param("tag", b"tag2", id="str-vs-other-bytes"),
    # AMQP types: same value, other type
    pytest.param({"@symbol": "amqp:x"}, "amqp:x", id="string-is-not-symbol"),
    pytest.param({"@string": "amqp:x"}, symbol("amqp:x"), id="symbol-is-not-string"),
    pytest.param({"@string": "x"}, char("x"), id="char-is-not-string"),
    pytest.param({"@binary": "t"}, "t", id="string-is-not-binary"),
    pytest.param({"@uint": 0}, 0, id="long-is-not-uint"),
    pytest.param({"@uint": 0}, ulong(0), id="ulong-is-not-uint"),
    pytest.param({"@ulong": 0}, uint(0), id="uint-is-not-ulong"),
    pytest.param({"@long": 0}, uint(0), id="uint-is-not-long"),
    pytest.param({"@boolean": False}, 0, id="long-is-not-boolean"),
    pytest.param({"@uint": 1}, uint(2), id="right-type-wrong-value"),
    pytest.param({"@symbol": "amqp:x"}, None, id="type-vs-none"),
    pytest.param({"@double": 1.5}, float32(1.5), id="float-is-not-double"),
]


@pytest.mark.parametrize(("pattern", "value"), MATCHING)
def test_matches(pattern, value):
    assert mismatches(pattern, value) == []
    assert matches(pattern, value) is True


@pytest.mark.parametrize(("pattern", "value"), NOT_MATCHING)
def test_does_not_match(pattern, value):
    found = mismatches(pattern, value)
    assert found, "expected at least one mismatch"
    assert all(isinstance(line, str) and ": expected " in line and ", observed " in line for line in found)
    assert matches(pattern, value) is False


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    pytest.param({"state": {"error": {"condition": "amqp:not-found"}}},
                 {"state": {"@type": "rejected", "error": {"condition": "amqp:internal-error"}}},
                 ["state.error.condition: expected amqp:not-found, observed amqp:internal-error"],
                 id="nested-path"),
    pytest.param({"a": 1, "b": 2}, {"a": 0, "b": 0},
                 ["a: expected 1, observed 0", "b: expected 2, observed 0"], id="every-mismatch-listed"),
    pytest.param({"xs": [1, {"k": "v"}]}, {"xs": [1, {"k": "w"}]},
                 ["xs[1].k: expected v, observed w"], id="list-index-in-path"),
    pytest.param({"xs": [1, 2]}, {"xs": [1]}, ["xs: expected [1, 2], observed [1]"], id="list-length"),
    pytest.param(True, 1, ["(value): expected True, observed 1"], id="top-level-path"),
    pytest.param({"s": {"@present": True}}, {}, ["s: expected a value, observed None"], id="present-true-msg"),
    pytest.param({"s": {"@present": False}}, {"s": 3}, ["s: expected nothing, observed 3"], id="present-false-msg"),
    pytest.param({"s": {"@regex": "a+"}}, {"s": "b"}, ["s: expected text matching /a+/, observed b"], id="regex-msg"),
    pytest.param({"n": {"@at-least": 2}}, {"n": 1}, ["n: expected at least 2, observed 1"], id="at-least-msg"),
    pytest.param({"c": {"@symbol": "amqp:x"}}, {"c": "amqp:x"}, ["c: expected symbol amqp:x, observed string amqp:x"],
                 id="type-msg"),
    pytest.param({"m": {"@symbol-keys": {"x-opt-a": "v"}}}, {"m": {"x-opt-a": "w", symbol("x-opt-b"): 1}},
                 ["m: expected a map keyed by symbols, observed key x-opt-a of type string", "m.x-opt-a: expected v, "
                  "observed w"], id="symbol-keys-msg"),
])
def test_mismatch_messages(pattern, value, expected):
    assert mismatches(pattern, value) == expected


def test_one_of_message_names_options():
    (line,) = mismatches({"state": {"@one-of": [Released(), Rejected()]}}, {"state": ACCEPTED})
    assert line.startswith("state: expected one of ")
    assert "released" in line and "rejected" in line
    assert line.endswith("observed accepted")


# --- validate_pattern ------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [
    None,
    {},
    {"@type": "accepted"},
    {"state": {"@regex": "a.*b"}},
    {"x": {"@present": False}},
    {"x": {"@at-least": 256}},
    {"x": {"@one-of": [{"@regex": "a"}, None, 3]}},
    [{"@regex": "[0-9]+"}],
    Rejected("amqp:not-found", None),
])
def test_validate_pattern_accepts_well_formed(pattern):
    assert validate_pattern(pattern) == []


@pytest.mark.parametrize(("pattern", "fragments"), [
    pytest.param({"state": {"@regexp": "x"}}, ["state.@regexp", "unknown operator '@regexp'", "@regex"],
                 id="unknown-operator"),
    pytest.param({"name": {"@regex": "("}}, ["name.@regex", "invalid regular expression '('"], id="bad-regex"),
    pytest.param({"name": {"@regex": 5}}, ["name.@regex", "invalid regular expression 5"], id="regex-not-str"),
    pytest.param({"x": {"@one-of": "abc"}}, ["x.@one-of", "takes a list"], id="one-of-not-list"),
    pytest.param({"x": {"@one-of": [{"@regex": "["}]}}, ["x.@one-of[0].@regex", "invalid regular expression"],
                 id="bad-regex-inside-one-of"),
    pytest.param({"x": {"@includes": {"p": 1}}}, ["x.@includes", "takes a list"], id="includes-not-list"),
    pytest.param({"x": {"@at-least": "1"}}, ["x.@at-least", "takes a number"], id="at-least-not-number"),
    pytest.param({"x": {"@at-least": True}}, ["x.@at-least", "takes a number"], id="at-least-bool"),
    pytest.param({"x": {"@includes": [{"@regex": "["}]}}, ["x.@includes[0].@regex", "invalid regular expression"],
                 id="bad-regex-inside-includes"),
    pytest.param({"x": {"@each": {"@regex": "["}}}, ["x.@each.@regex", "invalid regular expression"],
                 id="bad-regex-inside-each"),
    pytest.param({"x": {"@symbol-keys": {"k": {"@regex": "["}}}}, ["x.@symbol-keys.k.@regex",
                                                                   "invalid regular expression"],
                 id="bad-regex-inside-symbol-keys"),
    pytest.param([{}, {"@nope": 1}], ["[1].@nope", "unknown operator"], id="inside-list"),
])
def test_validate_pattern_reports_problems(pattern, fragments):
    (problem,) = validate_pattern(pattern)
    for fragment in fragments:
        assert fragment in problem


def test_validate_pattern_reports_every_problem():
    problems = validate_pattern({"a": {"@bad": 1}, "b": {"@regex": "("}})
    assert len(problems) == 2


# --- peers.states helpers --------------------------------------------------------------------------

def _disposition_state(state) -> dict:
    """A delivery state as the splitter decodes it from a real disposition frame (2.7.6)."""
    raw = encode_frame(described("disposition", role=True, first=uint(0), settled=True, state=state))
    (frame,) = FrameSplitter("in").feed(raw)
    return frame.fields["state"]


def _rejected(condition: str, description: str | None = None) -> dict:
    # 3.4.3 rejected carrying a 2.8.14 error
    return _disposition_state(described("rejected", error=described(
        "error", condition=symbol(condition), description=description)))


def test_rejected_helper_matches_same_condition():
    state = _rejected("amqp:not-found")
    assert state == {"@type": "rejected", "error": {"@type": "error", "condition": "amqp:not-found"}}
    assert matches(Rejected("amqp:not-found"), state)


def test_rejected_helper_does_not_match_other_condition():
    state = _rejected("amqp:internal-error")
    assert not matches(Rejected("amqp:not-found"), state)
    assert mismatches(Rejected("amqp:not-found"), state) == [
        "error.condition: expected amqp:not-found, observed amqp:internal-error"
    ]


@pytest.mark.parametrize(("pattern", "state", "expected"), [
    (Rejected(), _rejected("amqp:not-found"), True),
    (Rejected(), _disposition_state(described("accepted")), False),
    (Rejected("amqp:not-found", "no such queue"), _rejected("amqp:not-found", "no such queue"), True),
    (Rejected("amqp:not-found", "no such queue"), _rejected("amqp:not-found", "other"), False),
    (Rejected("amqp:not-found", None), _rejected("amqp:not-found"), True),
    (Rejected("amqp:not-found", None), _rejected("amqp:not-found", "text"), False),
    (Accepted(), _disposition_state(described("accepted")), True),
    (Accepted(), _disposition_state(described("released")), False),
    (Released(), _disposition_state(described("released")), True),
    (Modified(delivery_failed=True), _disposition_state(described("modified", delivery_failed=True)), True),
    (Modified(delivery_failed=True), _disposition_state(described("modified", delivery_failed=False)), False),
    (Modified(undeliverable_here=None), _disposition_state(described("modified", delivery_failed=True)), True),
    (Modified(), _disposition_state(described("accepted")), False),
])
def test_state_helpers_against_decoded_states(pattern, state, expected):
    # 3.4 delivery states
    assert matches(pattern, state) is expected


@pytest.mark.parametrize(("pattern", "expected"), [
    (Error("amqp:not-found"), {"@type": "error", "condition": "amqp:not-found"}),
    (Error("amqp:not-found", None), {"@type": "error", "condition": "amqp:not-found", "description": None}),
    (Rejected(), {"@type": "rejected"}),
    (Rejected("c"), {"@type": "rejected", "error": {"@type": "error", "condition": "c"}}),
    (Modified(), {"@type": "modified"}),
    (Modified(True, False), {"@type": "modified", "delivery-failed": True, "undeliverable-here": False}),
])
def test_state_helper_patterns(pattern, expected):
    assert pattern == expected

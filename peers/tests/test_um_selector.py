"""Tests for amqp_conformance.peers.reference.selector: the JMS selector subset (JMS 2.0, 3.8.1.1) the
reference broker supports under the source filter key ``jms-selector`` (UM 10.11, Rejected/Subscription
row 1: a selector that does not parse is answered with amqp:invalid-field)."""

from __future__ import annotations

import pytest
from amqp_conformance.peers.reference.selector import (
    SelectorError,
    like_regex,
    message_env,
    parse,
    selector_text,
    tokenize,
)
from proton import Described, Message, symbol

PROPS = {"color": "red", "weight": 3, "price": 2.5, "size": "M", "name": "a_b%c", "flag": True}


@pytest.mark.parametrize(("text", "expected"), [
    ("color = 'red'", True),
    ("color <> 'red'", False),
    ("weight > 2 AND price < 3", True),
    ("weight > 2 AND price > 3", False),
    ("weight > 5 OR size = 'M'", True),
    ("NOT color = 'blue'", True),
    ("weight BETWEEN 1 AND 3", True),
    ("weight NOT BETWEEN 1 AND 3", False),
    ("size IN ('S', 'M', 'L')", True),
    ("size NOT IN ('S', 'L')", True),
    ("color LIKE 'r%'", True),
    ("color LIKE 'r_d'", True),
    ("color NOT LIKE '%e'", True),
    (r"name LIKE 'a\_b\%c' ESCAPE '\'", True),
    (r"name LIKE 'a\_b\%d' ESCAPE '\'", False),
    ("missing IS NULL", True),
    ("color IS NOT NULL", True),
    ("weight * 2 + 1 = 7", True),
    ("-weight = -3", True),
    ("weight / 2 = 1", True),  # integer division, as Java's
    ("price / 2 = 1.25", True),
    ("(weight = 3 OR color = 'x') AND flag = TRUE", True),
    ("flag", True),
    ("color = 'it''s'", False),
    ("JMSType = 'kind'", True),
])
def test_selector_evaluation(text: str, expected: bool) -> None:
    assert parse(text).matches({**PROPS, "JMSType": "kind"}) is expected


@pytest.mark.parametrize(("text", "value"), [
    ("missing = 1", None),  # unknown: an absent property
    ("missing = 1 OR color = 'red'", True),  # TRUE OR unknown is TRUE
    ("missing = 1 AND color = 'red'", None),
    ("missing = 1 AND color = 'blue'", False),  # FALSE AND unknown is FALSE
    ("NOT missing = 1", None),
    ("color > 'a'", None),  # ordering on strings is not defined
    ("color = 3", None),  # different types
    ("weight / 0 = 1", None),
])
def test_three_valued_logic(text: str, value: bool | None) -> None:
    assert parse(text).evaluate(PROPS) is value
    assert parse(text).matches(PROPS) is (value is True)


@pytest.mark.parametrize(("text", "where"), [
    ("color = ", "position 8"),
    ("color == 'red'", "position 7"),
    ("color = 'red", "position 8"),
    ("size IN (1, 2)", "string literal"),
    ("weight BETWEEN 1", "AND"),
    ("color NOT 'red'", "BETWEEN, IN or LIKE"),
    ("(color = 'red'", "')'"),
    ("color = 'red')", "end of the selector"),
    ("AND", "a literal"),
    ("color LIKE 'x' ESCAPE 'ab'", "one character"),
    ("   ", "empty"),
    ("color # 1", "unexpected character"),
])
def test_parse_errors_say_where(text: str, where: str) -> None:
    with pytest.raises(SelectorError, match=where.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


def test_keywords_are_case_insensitive_and_identifiers_are_not() -> None:
    assert parse("color = 'red' and not Color is not null").matches(PROPS)
    assert [t.kind for t in tokenize("a AND b")] == ["ident", "keyword", "ident", "end"]


def test_like_regex_escapes_regex_characters() -> None:
    assert like_regex("a.b%", None).fullmatch("a.bxyz")
    assert not like_regex("a.b%", None).fullmatch("aXb")


def test_selector_text_from_a_filter_map() -> None:
    described = {symbol("jms-selector"): Described(symbol("apache.org:selector-filter:string"), "a = 1")}
    assert selector_text(described) == "a = 1"
    assert selector_text({symbol("jms-selector"): "b = 2"}) == "b = 2"
    assert selector_text({symbol("other"): "x"}) is None
    assert selector_text(None) is None


def test_message_env_maps_properties_and_jms_headers() -> None:
    message = Message(body="x", properties={"color": "red"}, subject="kind", id="id-1", priority=7)
    env = message_env(message)
    assert env["color"] == "red"
    assert env["JMSType"] == "kind"
    assert env["JMSMessageID"] == "id-1"
    assert env["JMSPriority"] == 7

"""A parser and evaluator for the JMS message selector subset the reference broker supports. No I/O.

A subscriber names a selector in its source's filter map under the key ``jms-selector`` (UM 10.11,
"Rejected: Subscription Mapping": a selector that does not parse is answered with ``amqp:invalid-field``).
:func:`parse` turns the text into a :class:`Selector` or raises :class:`SelectorError` saying where and why.

The subset (JMS 2.0, 3.8.1.1): literals (``'text'`` with ``''`` for a quote, integers, decimals, ``TRUE``,
``FALSE``), identifiers (message application properties, and ``JMSMessageID``, ``JMSCorrelationID``,
``JMSPriority``, ``JMSType`` from the AMQP header and properties), parentheses, ``NOT``/``AND``/``OR``,
``= <> < > <= >=``, ``+ - * /`` (binary and unary), ``[NOT] BETWEEN a AND b``, ``[NOT] IN ('a', ...)``,
``[NOT] LIKE 'pattern' [ESCAPE 'c']`` and ``IS [NOT] NULL``. Evaluation uses SQL's three-valued logic: an
unknown (``None``) result does not select the message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Env = Mapping[str, Any]
Node = Callable[[Env], Any]

RESERVED = frozenset({"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"})
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>'(?:[^']|'')*')
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|<=|>=|=|<|>|\+|-|\*|/|\(|\)|,)
""", re.VERBOSE)


class SelectorError(ValueError):
    """The selector text does not parse; the message says at which character and what was expected."""


@dataclass(frozen=True)
class Token:
    """One lexical token: its kind (string, number, ident, keyword, op, end), value and position."""

    kind: str
    value: Any
    pos: int


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; SelectorError on a character that starts none."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SelectorError(f"unexpected character {text[pos]!r} at position {pos}")
        kind = match.lastgroup
        raw = match.group()
        if kind == "string":
            tokens.append(Token("string", raw[1:-1].replace("''", "'"), pos))
        elif kind == "number":
            is_float = any(c in raw for c in ".eE")
            tokens.append(Token("number", float(raw) if is_float else int(raw), pos))
        elif kind == "ident":
            upper = raw.upper()
            tokens.append(Token("keyword", upper, pos) if upper in RESERVED else Token("ident", raw, pos))
        elif kind == "op":
            tokens.append(Token("op", raw, pos))
        pos = match.end()
    tokens.append(Token("end", None, len(text)))
    return tokens


@dataclass(frozen=True)
class Selector:
    """A parsed selector: :meth:`matches` says whether a message's properties select it."""

    text: str
    root: Node

    def evaluate(self, env: Env) -> Any:
        """The selector's value for these properties: True, False or None (unknown)."""
        return self.root(env)

    def matches(self, env: Env) -> bool:
        """True only when the selector evaluates to TRUE (unknown and false do not select)."""
        return self.root(env) is True


def parse(text: str) -> Selector:
    """Parse ``text`` into a :class:`Selector`; raises :class:`SelectorError` when it is not valid."""
    if not isinstance(text, str) or not text.strip():
        raise SelectorError("the selector is empty")
    parser = _Parser(tokenize(text))
    root = parser.expression()
    parser.expect_end()
    return Selector(text, root)


@functools.lru_cache(maxsize=256)
def parse_cached(text: str) -> Selector:
    """:func:`parse`, remembered by text: a :class:`Selector` is immutable, so one parse serves every link
    (and every check) that names the same text. A text that does not parse raises each time."""
    return parse(text)


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    if _num(left) and _num(right):
        return {"=": left == right, "<>": left != right, "<": left < right, ">": left > right,
                "<=": left <= right, ">=": left >= right}[op]
    if type(left) is type(right) and isinstance(left, (str, bool)) and op in ("=", "<>"):
        return (left == right) if op == "=" else (left != right)
    return None  # different types, or ordering on strings and booleans: unknown (JMS 3.8.1.2)


def _arith(op: str, left: Any, right: Any) -> Any:
    if not (_num(left) and _num(right)):
        return None
    if op == "/":
        if right == 0:
            return None
        return left / right if isinstance(left, float) or isinstance(right, float) else int(left / right)
    return {"+": left + right, "-": left - right, "*": left * right}[op]


def _not(value: Any) -> bool | None:
    return None if value is None else not value


def _and(left: Any, right: Any) -> bool | None:
    if left is False or right is False:
        return False
    if left is None or right is None:
        return None
    return True


def _or(left: Any, right: Any) -> bool | None:
    if left is True or right is True:
        return True
    if left is None or right is None:
        return None
    return False


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """The regular expression of a LIKE pattern: ``%`` any run, ``_`` one character, ``escape`` quotes them."""
    out, chars = [], iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            following = next(chars, None)
            if following is None:
                raise SelectorError("LIKE pattern ends with its escape character")
            out.append(re.escape(following))
        elif char == "%":
            out.append(".*")
        elif char == "_":
            out.append(".")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


class _Parser:
    """Recursive descent over the tokens; precedence OR < AND < NOT < comparison < + - < * / < unary."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def _error(self, expected: str) -> SelectorError:
        token = self.current
        seen = "the end" if token.kind == "end" else repr(token.value)
        return SelectorError(f"expected {expected} at position {token.pos}, found {seen}")

    def accept(self, kind: str, value: Any = None) -> Token | None:
        token = self.current
        if token.kind == kind and (value is None or token.value == value):
            self.index += 1
            return token
        return None

    def need(self, kind: str, value: Any = None, what: str = "") -> Token:
        token = self.accept(kind, value)
        if token is None:
            raise self._error(what or repr(value))
        return token

    def expect_end(self) -> None:
        if self.current.kind != "end":
            raise self._error("an operator or the end of the selector")

    def expression(self) -> Node:
        left = self.conjunction()
        while self.accept("keyword", "OR"):
            right = self.conjunction()
            left = (lambda a, b: lambda env: _or(a(env), b(env)))(left, right)
        return left

    def conjunction(self) -> Node:
        left = self.negation()
        while self.accept("keyword", "AND"):
            right = self.negation()
            left = (lambda a, b: lambda env: _and(a(env), b(env)))(left, right)
        return left

    def negation(self) -> Node:
        if self.accept("keyword", "NOT"):
            inner = self.negation()
            return lambda env: _not(inner(env))
        return self.comparison()

    def comparison(self) -> Node:
        left = self.additive()
        token = self.current
        if token.kind == "op" and token.value in ("=", "<>", "<", ">", "<=", ">="):
            self.index += 1
            right = self.additive()
            return lambda env: _compare(token.value, left(env), right(env))
        if self.accept("keyword", "IS"):
            negated = self.accept("keyword", "NOT") is not None
            self.need("keyword", "NULL", "NULL")
            return lambda env: (left(env) is not None) if negated else (left(env) is None)
        negated = self.accept("keyword", "NOT") is not None
        if self.accept("keyword", "BETWEEN"):
            low = self.additive()
            self.need("keyword", "AND", "AND")
            high = self.additive()

            def between(env: Env) -> bool | None:
                value = left(env)
                result = _and(_compare(">=", value, low(env)), _compare("<=", value, high(env)))
                return _not(result) if negated else result
            return between
        if self.accept("keyword", "IN"):
            self.need("op", "(", "'('")
            options = [self.need("string", what="a string literal").value]
            while self.accept("op", ","):
                options.append(self.need("string", what="a string literal").value)
            self.need("op", ")", "')'")

            def within(env: Env) -> bool | None:
                value = left(env)
                if not isinstance(value, str):
                    return None
                return (value not in options) if negated else (value in options)
            return within
        if self.accept("keyword", "LIKE"):
            pattern = self.need("string", what="a string literal pattern").value
            escape = None
            if self.accept("keyword", "ESCAPE"):
                escape = self.need("string", what="an escape character").value
                if len(escape) != 1:
                    raise SelectorError(f"ESCAPE takes one character, got {escape!r}")
            regex = like_regex(pattern, escape)

            def like(env: Env) -> bool | None:
                value = left(env)
                if not isinstance(value, str):
                    return None
                found = regex.fullmatch(value) is not None
                return (not found) if negated else found
            return like
        if negated:
            raise self._error("BETWEEN, IN or LIKE after NOT")
        return left

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.current.kind == "op" and self.current.value in ("+", "-"):
            op = self.current.value
            self.index += 1
            right = self.multiplicative()
            left = (lambda a, b, o: lambda env: _arith(o, a(env), b(env)))(left, right, op)
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.current.kind == "op" and self.current.value in ("*", "/"):
            op = self.current.value
            self.index += 1
            right = self.unary()
            left = (lambda a, b, o: lambda env: _arith(o, a(env), b(env)))(left, right, op)
        return left

    def unary(self) -> Node:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda env: (-inner(env)) if _num(inner(env)) else None
        if self.accept("op", "+"):
            inner = self.unary()
            return lambda env: inner(env) if _num(inner(env)) else None
        return self.primary()

    def primary(self) -> Node:
        token = self.current
        if self.accept("op", "("):
            inner = self.expression()
            self.need("op", ")", "')'")
            return inner
        if token.kind in ("string", "number"):
            self.index += 1
            return lambda env: token.value
        if token.kind == "keyword" and token.value in ("TRUE", "FALSE"):
            self.index += 1
            value = token.value == "TRUE"
            return lambda env: value
        if token.kind == "ident":
            self.index += 1
            return lambda env: env.get(token.value)
        raise self._error("a literal, an identifier or '('")


def message_env(message: Any) -> dict[str, Any]:
    """The identifiers a selector can name for a decoded ``proton.Message``: its application properties
    and the JMS header names mapped from the AMQP header and properties."""
    env: dict[str, Any] = {}
    for key, value in (message.properties or {}).items():
        env[str(key)] = value
    env.setdefault("JMSMessageID", None if message.id is None else str(message.id))
    env.setdefault("JMSCorrelationID", None if message.correlation_id is None else str(message.correlation_id))
    env.setdefault("JMSPriority", message.priority)
    env.setdefault("JMSType", message.subject)
    return env


def selector_text(filter_map: Any) -> str | None:
    """The selector named under ``jms-selector`` in a decoded source filter map (plain or described); None
    when there is none."""
    if not isinstance(filter_map, dict):
        return None
    for key, value in filter_map.items():
        if str(key) == "jms-selector":
            inner = getattr(value, "value", value)  # a described filter carries the text as its value
            return inner if isinstance(inner, str) else repr(inner)
    return None

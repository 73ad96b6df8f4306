"""Patterns over decoded AMQP data: the one matcher used by frame expectations and case verdicts.

A pattern is plain data, so case tables can hold it:

- a dict matches a dict when every key of the pattern matches the value's entry (a missing entry is
  ``None``); keys the pattern does not name are not judged;
- ``None`` matches an absent or null value;
- ``{"@regex": "..."}`` matches a str (or bytes, read as UTF-8) that the regular expression fully matches;
- ``{"@present": true}`` matches any non-null value, ``{"@present": false}`` an absent or null one;
- ``{"@at-least": n}`` matches a number (never a bool) no smaller than ``n``: a count the source bounds below,
  such as a deviation's "some tags clash" (``clashes = {"@at-least": 1}``);
- ``{"@one-of": [p1, p2]}`` matches when any of the patterns matches;
- ``{"@includes": [p1, p2]}`` matches a list holding, in that order, an element matching each pattern, with any
  other elements before, between and after them (a pattern that names the one error it concerns);
- ``{"@each": p}`` matches a list of one element or more, every one of which matches ``p`` (one fault told once
  for each of a row's deliveries, say, and nothing else);
- ``{"@symbol": p}`` (likewise ``@string``, ``@binary``, ``@boolean``, ``@ubyte``, ``@ushort``, ``@uint``,
  ``@ulong``, ``@byte``, ``@short``, ``@int``, ``@long``, ``@timestamp``, ``@char``, ``@float``, ``@double``)
  matches a value of that AMQP type (as decoded by ``proton.Data``, which keeps the type, see
  :func:`..frames.normalize`) that also matches ``p``: an error condition a string is not a symbol;
- ``{"@symbol-keys": p}`` matches a map every key of which is a symbol and that also matches ``p``: AMQP 1.0's
  ``fields`` (1.6.x, "a map keyed by symbols": a modified outcome's message-annotations, 3.4.5) and a message's
  annotations (3.2.10: symbol keys, or ulong ones reserved), whose string keys a map pattern alone would let pass
  (a ``proton.symbol`` key is a ``str``, so looking it up by name does not tell the two apart);
- a list matches a list of the same length element by element;
- a str matches an equal str, or bytes whose UTF-8 text is equal;
- anything else matches an equal value (``True`` does not equal ``1`` here).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from proton import byte, char, float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort

from .frames import render


def _is_string(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, (symbol, char))


def _is_exactly(kind: type) -> Callable[[Any], bool]:
    return lambda value: type(value) is kind


# AMQP 1.0 1.6 primitive types as proton.Data decodes them: a typed subclass each, except long (a plain int),
# double (a plain float), string (a plain str), binary (bytes) and boolean (bool)
AMQP_TYPES: dict[str, Callable[[Any], bool]] = {
    "symbol": lambda value: isinstance(value, symbol),
    "string": _is_string,
    "char": lambda value: isinstance(value, char),
    "binary": lambda value: isinstance(value, (bytes, bytearray)),
    "boolean": lambda value: isinstance(value, bool),
    "ubyte": lambda value: isinstance(value, ubyte),
    "ushort": lambda value: isinstance(value, ushort),
    "uint": lambda value: isinstance(value, uint),
    "ulong": lambda value: isinstance(value, ulong),
    "byte": lambda value: isinstance(value, byte),
    "short": lambda value: isinstance(value, short),
    "int": lambda value: isinstance(value, int32),
    "long": _is_exactly(int),
    "timestamp": lambda value: isinstance(value, timestamp),
    "float": lambda value: isinstance(value, float32),
    "double": _is_exactly(float),
}
TYPE_OPERATORS = tuple(f"@{name}" for name in AMQP_TYPES)
OPERATORS = ("@regex", "@present", "@at-least", "@one-of", "@includes", "@each", "@symbol-keys", *TYPE_OPERATORS)


def amqp_type_of(value: Any) -> str:
    """The AMQP type name of a decoded scalar ("symbol", "uint", ...), or its Python type's name otherwise."""
    for name, test in AMQP_TYPES.items():
        if test(value):
            return name
    return "null" if value is None else type(value).__name__


def mismatches(pattern: Any, value: Any, path: str = "") -> list[str]:
    """Every place where ``value`` fails ``pattern``, as "path: expected X, observed Y" lines; [] if it matches."""
    where = path or "(value)"
    if isinstance(pattern, dict) and len(pattern) == 1 and next(iter(pattern)) in OPERATORS:
        return _operator(pattern, value, where)
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return [f"{where}: expected {render(pattern)}, observed {render(value)}"]
        found: list[str] = []
        for key, sub in pattern.items():
            found += mismatches(sub, value.get(key), f"{path}.{key}" if path else str(key))
        return found
    if isinstance(pattern, list):
        if not isinstance(value, list) or len(value) != len(pattern):
            return [f"{where}: expected {render(pattern)}, observed {render(value)}"]
        found = []
        for index, (sub, item) in enumerate(zip(pattern, value, strict=False)):
            found += mismatches(sub, item, f"{path}[{index}]")
        return found
    if _scalar_equal(pattern, value):
        return []
    return [f"{where}: expected {render(pattern)}, observed {render(value)}"]


def matches(pattern: Any, value: Any) -> bool:
    """True when ``value`` satisfies ``pattern`` (see the module docstring for the pattern language)."""
    return not mismatches(pattern, value)


def _operator(pattern: dict, value: Any, where: str) -> list[str]:
    op, arg = next(iter(pattern.items()))
    if op in TYPE_OPERATORS:
        kind = op[1:]
        if not AMQP_TYPES[kind](value):
            return [f"{where}: expected {kind} {render(arg)}, observed {amqp_type_of(value)} {render(value)}"]
        return mismatches(arg, value, where)
    if op == "@present":
        if (value is not None) == bool(arg):
            return []
        return [f"{where}: expected {'a value' if arg else 'nothing'}, observed {render(value)}"]
    if op == "@at-least":
        if _is_number(value) and value >= arg:
            return []
        return [f"{where}: expected at least {render(arg)}, observed {render(value)}"]
    if op == "@regex":
        text = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value
        if isinstance(text, str) and re.fullmatch(arg, text):
            return []
        return [f"{where}: expected text matching /{arg}/, observed {render(value)}"]
    if op == "@includes":
        return _includes(arg, value, where)
    if op == "@symbol-keys":
        if not isinstance(value, dict):
            return [f"{where}: expected a map keyed by symbols matching {render(arg)}, observed {render(value)}"]
        found = [f"{where}: expected a map keyed by symbols, observed key {render(key)} of type {amqp_type_of(key)}"
                 for key in value if not isinstance(key, symbol)]
        return found + mismatches(arg, value, where)
    if op == "@each":
        if not isinstance(value, list) or not value:
            return [f"{where}: expected a list of one or more, each {render(arg)}, observed {render(value)}"]
        return [line for index, item in enumerate(value) for line in mismatches(arg, item, f"{where}[{index}]")]
    # @one-of
    if any(not mismatches(option, value) for option in arg):
        return []
    return [f"{where}: expected one of {render(arg)}, observed {render(value)}"]


def _includes(patterns: list, value: Any, where: str) -> list[str]:
    """[] when ``value`` is a list holding an element matching each of ``patterns``, in their order. Each pattern
    takes the earliest element after the previous one's that matches it: if any in-order choice exists, that
    one does, since an earlier element never leaves less room for the patterns after it."""
    if isinstance(value, list):
        items = iter(value)
        if all(any(not mismatches(sub, item) for item in items) for sub in patterns):
            return []
    return [f"{where}: expected a list including, in order, {render(patterns)}, observed {render(value)}"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _scalar_equal(pattern: Any, value: Any) -> bool:
    if isinstance(pattern, bool) or isinstance(value, bool):
        return type(pattern) is type(value) and pattern == value
    if isinstance(pattern, str) and isinstance(value, (bytes, bytearray)):
        return bytes(value) == pattern.encode("utf-8")
    return pattern == value


def validate_pattern(pattern: Any, path: str = "") -> list[str]:
    """Problems with a pattern's operators (unknown ``@`` keys, bad regex); [] when it is well-formed."""
    problems: list[str] = []
    if isinstance(pattern, dict):
        for key, sub in pattern.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and key.startswith("@") and key != "@type":
                if key not in OPERATORS:
                    problems.append(f"{here}: unknown operator {key!r} (known: {', '.join(OPERATORS)})")
                elif key == "@regex":
                    try:
                        re.compile(sub)
                    except (re.error, TypeError) as exc:
                        problems.append(f"{here}: invalid regular expression {sub!r}: {exc}")
                elif key == "@at-least":
                    if not _is_number(sub):
                        problems.append(f"{here}: @at-least takes a number, not {sub!r}")
                elif key in (*TYPE_OPERATORS, "@each", "@symbol-keys"):
                    problems += validate_pattern(sub, here)
                elif key in ("@one-of", "@includes"):
                    if not isinstance(sub, list):
                        problems.append(f"{here}: {key} takes a list of patterns")
                    else:
                        for i, option in enumerate(sub):
                            problems += validate_pattern(option, f"{here}[{i}]")
            else:
                problems += validate_pattern(sub, here)
    elif isinstance(pattern, list):
        for i, sub in enumerate(pattern):
            problems += validate_pattern(sub, f"{path}[{i}]")
    return problems

"""What the python-proton shim writes and reads: JSON values from proton's objects and back, no I/O.

Every function here is pure: it reads a proton object (a delivery's disposition, a condition, a link's
settle mode) and gives the JSON the contract of ``../README.md`` names, or reads a command's JSON and sets
the local disposition proton will send. Nothing is inferred: a field proton does not give is null.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from proton import Array, Condition, Delivery, Disposition, Link, Terminus, symbol

SND_MODES = {"unsettled": Link.SND_UNSETTLED, "settled": Link.SND_SETTLED, "mixed": Link.SND_MIXED}
RCV_MODES = {"first": Link.RCV_FIRST, "second": Link.RCV_SECOND}
TERMINAL = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)
STATE_NAMES = {Delivery.RECEIVED: "received", Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
               Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}
OUTCOME_TYPES = ("accepted", "rejected", "released", "modified")


class Unsupported(Exception):
    """The command asks for what proton's API cannot express exactly: replied ``unsupported``, nothing sent."""


class BadCommand(Exception):
    """The command is malformed (a missing or mistyped field): replied as a ``client`` error."""


def mode_name(table: dict[str, int], value: int) -> str | None:
    """The contract's name of a settle mode (``unsettled``, ``first``, ...); None for a value outside it."""
    return next((name for name, mode in table.items() if mode == value), None)


def tag_hex(delivery: Delivery) -> str:
    """The delivery's tag in hex, exactly as on the wire.

    proton 0.40's ``Delivery.tag`` decodes the tag as UTF-8 (``UnicodeDecodeError`` for any other bytes, which
    the binary delivery-tag allows) and raises ``RuntimeError`` for an empty tag: those are read from proton's
    C API (``pn_delivery_tag``) instead.
    """
    try:
        tag = delivery.tag
    except RuntimeError:
        return ""
    except UnicodeDecodeError:
        from cproton import ffi, lib

        raw = lib.pn_delivery_tag(delivery._impl)
        return bytes(ffi.unpack(raw.start, raw.size)).hex()
    return (tag.encode("utf-8") if isinstance(tag, str) else bytes(tag)).hex()


def to_json(value: Any) -> Any:
    """An AMQP value as proton decodes it, as JSON: symbols and strings as strings, binary as
    ``{"binary": HEX}``, maps with string keys, lists as lists, UUIDs and other scalars as their text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value if not isinstance(value, symbol) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"binary": bytes(value).hex()}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Array):
        return [to_json(v) for v in value.elements]
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def body_text(body: Any) -> str | None:
    """A received message's body as the report's ``body`` string: a string as it is, binary (an AMQP ``data``
    section) decoded as UTF-8 (undecodable bytes as base64 with a ``base64:`` prefix), anything else as JSON
    text of :func:`to_json`; None for no body."""
    if body is None or isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            return bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(bytes(body)).decode("ascii")
    import json

    return json.dumps(to_json(body), sort_keys=True)


def condition_json(condition: Condition | None) -> tuple[str | None, str | None]:
    """``(condition, description)`` of a proton ``Condition`` as the API gives them; ``(None, None)`` for none."""
    if condition is None:
        return None, None
    return (str(condition.name) if condition.name is not None else None,
            str(condition.description) if condition.description is not None else None)


def state_json(state: int, disposition: Disposition) -> dict[str, Any] | None:
    """A delivery state (``remote_state`` and ``delivery.remote``) as the contract's JSON; None for no state.

    Rejected carries ``condition`` and ``description``; modified ``delivery_failed``, ``undeliverable_here`` and
    ``message_annotations``; received ``section_number`` and ``section_offset``. A state the contract does not
    name (a transactional state) is ``{"type": "other", "code": N}``.
    """
    if not state:
        return None
    name = STATE_NAMES.get(state)
    if name is None:
        return {"type": "other", "code": int(state)}
    found: dict[str, Any] = {"type": name}
    if state == Delivery.REJECTED:
        found["condition"], found["description"] = condition_json(disposition.condition)
    elif state == Delivery.MODIFIED:
        found["delivery_failed"] = bool(disposition.failed)
        found["undeliverable_here"] = bool(disposition.undeliverable)
        found["message_annotations"] = to_json(disposition.annotations) if disposition.annotations else None
    elif state == Delivery.RECEIVED:
        found["section_number"] = int(disposition.section_number)
        found["section_offset"] = int(disposition.section_offset)
    return found


def check_outcome(outcome: Any) -> dict[str, Any]:
    """The command's ``outcome``, checked: :class:`BadCommand` for a malformed one, :class:`Unsupported` for one
    proton cannot send exactly (a rejection with a description and no condition: an AMQP error needs one)."""
    if not isinstance(outcome, dict) or outcome.get("type") not in OUTCOME_TYPES:
        raise BadCommand(f"outcome must be an object with type one of {', '.join(OUTCOME_TYPES)}, got {outcome!r}")
    kind = outcome["type"]
    if kind == "rejected":
        condition, description = outcome.get("condition"), outcome.get("description")
        if condition is not None and not isinstance(condition, str):
            raise BadCommand(f"rejected condition must be a string, got {condition!r}")
        if description is not None and not isinstance(description, str):
            raise BadCommand(f"rejected description must be a string, got {description!r}")
        if condition is None and description is not None:
            raise Unsupported("a rejected outcome's error needs a condition; proton's Condition cannot carry a "
                              "description without one")
    if kind == "modified":
        for flag in ("delivery_failed", "undeliverable_here"):
            if not isinstance(outcome.get(flag, False), bool):
                raise BadCommand(f"modified {flag} must be a boolean, got {outcome[flag]!r}")
        annotations = outcome.get("message_annotations")
        if annotations is not None and not isinstance(annotations, dict):
            raise BadCommand(f"modified message_annotations must be an object, got {annotations!r}")
    return outcome


def give_outcome(delivery: Delivery, outcome: dict[str, Any]) -> None:
    """Set the checked ``outcome`` on the delivery's local disposition and send it (``Delivery.update``).

    Rejected: ``delivery.local.condition = Condition(condition, description)`` (none without a condition);
    modified: ``local.failed``, ``local.undeliverable`` and ``local.annotations`` (symbol keys); then
    ``delivery.update(STATE)``. Settling is the caller's.
    """
    kind = outcome["type"]
    if kind == "rejected" and outcome.get("condition") is not None:
        delivery.local.condition = Condition(outcome["condition"], outcome.get("description"))
    if kind == "modified":
        delivery.local.failed = bool(outcome.get("delivery_failed", False))
        delivery.local.undeliverable = bool(outcome.get("undeliverable_here", False))
        annotations = outcome.get("message_annotations")
        if annotations is not None:
            delivery.local.annotations = {symbol(key): value for key, value in annotations.items()}
    delivery.update({"accepted": Delivery.ACCEPTED, "rejected": Delivery.REJECTED, "released": Delivery.RELEASED,
                     "modified": Delivery.MODIFIED}[kind])


def is_null_terminus(terminus: Terminus) -> bool:
    """Whether the peer's attach carried no source or target (a refused attach, to be followed by a detach)."""
    return terminus.type == Terminus.UNSPECIFIED


def error(kind: str, description: str | None, **fields: Any) -> dict[str, Any]:
    """A reply's ``error`` object: ``kind`` (amqp, unsupported, timeout, client), ``description``, and for
    ``amqp`` the ``scope`` and ``condition``."""
    return {"kind": kind, **fields, "description": description}


def amqp_error(scope: str, condition: Condition | None) -> dict[str, Any]:
    """The ``amqp`` error of an endpoint the peer closed (``scope``: connection, session, link), with its
    condition as proton gives it (both null when the peer gave none)."""
    name, description = condition_json(condition)
    return error("amqp", description, scope=scope, condition=name)

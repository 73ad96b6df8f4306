"""Patterns for delivery states and errors, so expectations read like the specification.

``Rejected("amqp:not-found")`` is the pattern ``{"@type": "rejected", "error": {"condition": "amqp:not-found"}}``
(see :mod:`matching`). Fields left out are not judged; pass ``None`` to require absence.
"""

from __future__ import annotations

from typing import Any

_UNSET: Any = object()


def Error(condition: str, description: Any = _UNSET) -> dict:  # noqa: N802 - reads as the AMQP type
    """An ``amqp:error`` pattern with the condition symbol and, if given, the exact description."""
    pattern: dict[str, Any] = {"@type": "error", "condition": condition}
    if description is not _UNSET:
        pattern["description"] = description
    return pattern


def Accepted() -> dict:  # noqa: N802
    """The ``accepted`` outcome (3.4.2)."""
    return {"@type": "accepted"}


def Rejected(condition: str | None = None, description: Any = _UNSET) -> dict:  # noqa: N802
    """The ``rejected`` outcome (3.4.3), with its error condition when given."""
    pattern: dict[str, Any] = {"@type": "rejected"}
    if condition is not None:
        pattern["error"] = Error(condition, description)
    return pattern


def Released() -> dict:  # noqa: N802
    """The ``released`` outcome (3.4.4)."""
    return {"@type": "released"}


def Modified(delivery_failed: Any = _UNSET, undeliverable_here: Any = _UNSET) -> dict:  # noqa: N802
    """The ``modified`` outcome (3.4.5) with the flags given."""
    pattern: dict[str, Any] = {"@type": "modified"}
    if delivery_failed is not _UNSET:
        pattern["delivery-failed"] = delivery_failed
    if undeliverable_here is not _UNSET:
        pattern["undeliverable-here"] = undeliverable_here
    return pattern

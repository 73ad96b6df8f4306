"""The scenario registry: for each scenario, the ``given`` fields a row may set and what it observes.

This is the schema the case tables are checked against: a row may only give values a scenario knows and
expect observations the scenario makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import scripts
from .context import CaseContext

Script = Callable[[CaseContext, dict[str, Any]], dict[str, Any]]
Needs = Callable[[dict[str, Any]], tuple[str, ...]]
TRANSFER_KINDS = ("settled", "unsettled", "partial", "partial-settled")
"""A publishing row's transfers, one word each: a whole message pre-settled or unsettled, one unsettled in two
transfer frames (``partial``: the first sent alone), or one settled from the first of several frames
(``partial-settled``: sent at once, split at the broker's max-frame-size)."""
STORE = "store"
"""The capability of a broker that keeps a message for a node no consumer is attached to, and so grants a
publisher credit there. A router has none: it grants a publisher credit only towards a consumer (observed
against Qpid Dispatch 1.19: docs/brokers.md, "Qpid Dispatch / skupper-router"). A scenario that publishes
before any consumer is attached, or to a node it then reads back, needs it."""


def needs_nothing(given: dict[str, Any]) -> tuple[str, ...]:
    """For a scenario that runs on every broker: it requires no capability."""
    return ()


def needs_store(given: dict[str, Any]) -> tuple[str, ...]:
    """For a scenario that always publishes to a node before (or without) consuming from it."""
    return (STORE,)


@dataclass(frozen=True)
class Scenario:
    """A script and its schema. ``given`` maps each field to its allowed values (a tuple), its type, or a
    validator function returning why a value is wrong (None when it is right)."""

    name: str
    script: Script
    given: dict[str, tuple | type]
    observations: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    needs: Needs = needs_nothing  # the capabilities a row of this scenario requires, given its ``given``
    check_row: Callable[[dict[str, Any]], str | None] | None = None  # why a row's whole given is wrong (fields
    # that must agree with each other), or None when it is right

    def check_given(self, key: str, value: Any) -> str | None:
        """Why ``value`` is not allowed for ``given.key``, or None when it is."""
        if key not in self.given:
            return f"scenario {self.name!r} takes no such field (fields: {', '.join(self.given)})"
        allowed = self.given[key]
        if hasattr(allowed, "check_value"):  # a schema object that explains what is wrong
            return allowed.check_value(value)
        if isinstance(allowed, tuple):
            return None if value in allowed else f"{value!r} is not one of {', '.join(map(str, allowed))}"
        if callable(allowed) and not isinstance(allowed, type):
            return allowed(value)  # a validator: returns why the value is wrong, or None
        if key == "transfers":
            if not isinstance(value, list) or not value or any(v not in TRANSFER_KINDS for v in value):
                return f"expected a non-empty list of {', '.join(TRANSFER_KINDS)}"
            return None
        if not isinstance(value, allowed) or (allowed is not bool and isinstance(value, bool)):
            return f"expected {allowed.__name__}, got {type(value).__name__} {value!r}"
        return None


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "subscribe", scripts.run_subscribe,
            given={
                "rcv_settle_mode": ("first", "second"),
                "durable": ("none", "configuration", "unsettled-state"),
                "disposition_state": ("none", "accepted"),
                "disposition_settled": bool,
                "durable_end": ("detach", "close"),
            },
            defaults={"rcv_settle_mode": "first", "durable": "none", "durable_end": "detach"},
            observations=("subscribed", "delivery_tag", "broker_disposition", "broker_disposition_covers", "link",
                          "detach", "remaining"),
            needs=needs_store,
        ),
        Scenario(
            "publish", scripts.run_publish,
            given={
                "snd_settle_mode": ("unsettled", "settled", "mixed"),
                "transfers": list,
                "provocation": ("none", "transformer-null"),
            },
            defaults={"provocation": "none"},
            observations=("dispositions", "dispositions_cover", "detach", "stored"),
            needs=needs_store,
        ),
        Scenario(
            "wire-disposition", scripts.run_wire_disposition,
            given={},
            observations=("broker_disposition", "broker_disposition_bytes", "peer_disposition_bytes"),
            needs=needs_store,
        ),
    )
}

# -- UM 10.11 rejections, link fate and transactions (conformance/scripts_um.py) ---------------------------
from . import scripts_um  # noqa: E402

UM_PROVOCATIONS = ("none", "transformer-null", "deny-publish", "deny-subscribe", "deny-durable-subscribe",
                   "store-full", "internal-error", "remove-node", "remove-durable-subscription")
SCENARIOS.update({s.name: s for s in (
    Scenario(
        "subscription-fault", scripts_um.run_subscription_fault,
        needs=needs_store,
        given={
            "when": ("subscribe", "ack"),
            "provocation": UM_PROVOCATIONS,
            "selector": str,
            "already_subscribed": bool,
            "resubscribe": bool,
            "rcv_settle_mode": ("first", "second"),
            "durable": ("none", "configuration", "unsettled-state"),
        },
        defaults={"when": "subscribe", "provocation": "none", "selector": "", "already_subscribed": False,
                  "rcv_settle_mode": "first", "durable": "none", "resubscribe": False},
        observations=("detach", "delivered_after", "delivery_tag", "broker_disposition", "broker_disposition_covers",
                      "first_subscriber", "resubscribed"),
    ),
    Scenario(
        "um-publish", scripts_um.run_um_publish,
        needs=needs_store,
        given={
            "snd_settle_mode": ("unsettled", "settled", "mixed"),
            "transfers": list,
            "provocation": UM_PROVOCATIONS,
            "relieve": bool,
            "transactional": bool,
            "discharge": ("none", "commit", "rollback", "commit-unset", "close"),
            "discharge_id": ("declared", "never-declared"),
            "discharge_again": bool,
            "durable_header": bool,
            "descriptors": ("numeric", "symbolic"),
            "txn": ("declared", "undeclared", "null"),
            "coordinator_last": ("none", "non-control"),
            "bystander": bool,
            "reattach": bool,
            "many_transactions": bool,
            "control_link": ("kept", "link-closed", "connection-closed"),
        },
        defaults={"snd_settle_mode": "unsettled", "provocation": "none", "relieve": False, "transactional": False,
                  "discharge": "none", "discharge_id": "declared", "discharge_again": False,
                  "durable_header": False, "descriptors": "numeric", "txn": "declared", "coordinator_last": "none",
                  "bystander": False, "reattach": False, "many_transactions": False,
                  "control_link": "kept"},
        observations=("declared", "dispositions", "dispositions_cover", "detach", "after_detach",
                      "visible_before_discharge", "discharge", "second_discharge", "other_discharge", "stored",
                      "coordinator_answer", "bystander", "reattached", "many_transactions"),
    ),
    Scenario(
        "txn-acquire", scripts_um.run_txn_acquire,
        needs=needs_store,
        given={
            "discharge": ("commit", "rollback"),
            "outcome": ("accepted", "released", "modified"),
            "descriptors": ("numeric", "symbolic"),
            "txn": ("declared", "undeclared", "null"),
            "detach_first": bool,
            "rcv_settle_mode": ("first", "second"),
            "durable": ("configuration", "unsettled-state"),
        },
        defaults={"rcv_settle_mode": "first", "durable": "configuration", "outcome": "accepted",
                  "descriptors": "numeric", "txn": "declared", "detach_first": False},
        observations=("declared", "delivery_tag", "first_delivery", "broker_disposition", "discharge", "remaining",
                      "redelivered"),
    ),
)})

# -- router (issue 5): one producer and several consumers on separate connections, through a router ------
from . import scripts_router  # noqa: E402  (appended registration; the router scenario lives in its own module)

SCENARIOS["router"] = Scenario("router", scripts_router.run_router, given=scripts_router.GIVEN,
                               observations=scripts_router.OBSERVATIONS, defaults=scripts_router.DEFAULTS)

# -- core AMQP 1.0 catalogue (issue 4): settlement, outcomes, transfers, wire, bad input -------------------
from .scenarios_core import CORE_SCENARIOS  # noqa: E402

SCENARIOS.update({s.name: s for s in CORE_SCENARIOS})

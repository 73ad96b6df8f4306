"""Scenarios of the core AMQP 1.0 catalogue (``core.*``, ``wire.performatives``): their given schema and observations.

Registered into :data:`scenarios.SCENARIOS` at the end of that module.
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.rawframes import check_spec

from . import scripts_consumers, scripts_core, scripts_errors, scripts_flow, scripts_sasl, scripts_wire
from .scenarios import STORE, Scenario, needs_store


class FrameList:
    """Schema of ``given.frames``: a non-empty list of frame specifications (see ``peers/rawframes.py``)."""

    @staticmethod
    def check_value(value: Any) -> str | None:
        """Why ``value`` is not a usable list of frames, or None."""
        if not isinstance(value, list) or not value:
            return "expected a non-empty list of frame tables"
        for index, spec in enumerate(value):
            problem = check_spec(spec)
            if problem:
                return f"frame [{index}]: {problem}"
        return None


CORE_SCENARIOS = (
    Scenario(
        "flow", scripts_flow.run_flow,
        given={"messages": int, "credit": int, "drain": bool, "large_first": bool,
               "provocation": ("none", "abort-first-delivery")},
        defaults={"drain": False, "large_first": False, "provocation": "none"},
        observations=("before_credit", "delivered", "broker_flow", "over_stated_credit", "after_drain"),
        needs=lambda given: (STORE,) if given.get("messages", 0) > 0 else (),  # published before the credit
    ),
    Scenario(
        "consumers", scripts_consumers.run_consumers,
        given={"messages": int, "credits": list, "publisher": ("own-connection", "first-consumer-link-name")},
        defaults={"publisher": "own-connection"},
        observations=("before_credit", "counts", "union", "duplicates", "remaining"),
        needs=needs_store,
    ),
    Scenario(
        "raw-frames", scripts_errors.run_raw_frames,
        given={
            "setup": scripts_errors.SETUPS,
            "frames": FrameList,
            "provocation": ("none", "withhold-credit", "deny-publish", "deny-subscribe"),
            "shutdown_write": bool,
            "attach": dict,
        },
        defaults={"provocation": "none", "shutdown_write": False, "attach": {}},
        observations=("answer", "then", "header", "socket", "alive", "sent", "opened", "states"),
        needs=lambda given: (STORE,) if given.get("setup") in scripts_errors.PUBLISHING_SETUPS else (),
    ),
    Scenario(
        "sasl", scripts_sasl.run_sasl,
        given={"credentials": tuple(scripts_sasl.CREDENTIALS), "pipeline": bool, "header_with_init": bool},
        defaults={"pipeline": False, "header_with_init": False},
        observations=("outcome", "header", "sent", "connection", "socket", "negotiation"),
    ),
    Scenario(
        "consume", scripts_core.run_consume,
        given={
            "messages": int, "range": int, "durable": bool,
            "rcv_settle_mode": ("first", "second"), "snd_settle_mode": ("unsettled", "settled", "mixed"),
            "outcome": scripts_core.OUTCOMES, "settle": bool, "then": ("none", "accept", "close-link"),
            "delivery_failed": bool, "undeliverable_here": bool, "annotations": dict,
            "condition": str, "description": str, "info": dict, "section_number": int, "section_offset": int,
            "rounds": int, "interloper": bool,
        },
        defaults={"messages": 2, "range": 1, "durable": True, "rcv_settle_mode": "first",
                  "snd_settle_mode": "unsettled", "settle": True, "then": "none", "delivery_failed": False,
                  "undeliverable_here": False, "rounds": 1, "interloper": False},
        observations=("broker_attach", "transfer", "sender_settle_mode", "broker_dispositions", "settled_offsets",
                      "after_accept", "next_on_link", "later_on_link", "broker_detach", "remaining",
                      "remaining_messages", "default_outcome"),
        needs=needs_store,
    ),
    Scenario(
        "produce", scripts_core.run_produce,
        given={
            "snd_settle_mode": ("unsettled", "settled", "mixed"), "rcv_settle_mode": ("first", "second"),
            "transfers": list, "size": int,
            "provocation": ("none", "reject-publish", "release-publish", "modify-publish", "report-received"),
            "interloper": bool, "twin": bool,
        },
        defaults={"snd_settle_mode": "unsettled", "rcv_settle_mode": "first", "provocation": "none", "size": 0,
                  "interloper": False, "twin": False},
        observations=("broker_attach", "dispositions", "progress", "ordering", "answer_counts", "stored", "twin"),
        needs=needs_store,
    ),
    Scenario(
        "transfer", scripts_core.run_transfer,
        given={"kind": ("multi-frame-in", "multi-frame-out", "aborted-in", "tag-reuse", "whole",
                        "buffered-until-credit"), "size": int,
               "provocation": ("none", "credit-one-at-a-time")},
        defaults={"size": 0, "provocation": "none"},
        observations=("shape", "dispositions", "stored", "intact", "before_credit", "after_credit",
                      "credit_after_abort"),
        needs=needs_store,
    ),
    Scenario(
        "wire-performatives", scripts_wire.run_wire_performatives,
        given={"side": ("broker", "peer"), "frame": scripts_wire.FRAMES},
        observations=("decoded", "bytes", "form", "link"),
        needs=needs_store,  # one shared exchange: a message sent, then received and settled
    ),
)

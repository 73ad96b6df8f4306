"""Scenarios of the core AMQP 1.0 catalogue (``core.*``, ``wire.performatives``): their given schema and observations.

Registered into :data:`scenarios.SCENARIOS` at the end of that module.
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.rawframes import check_spec

from . import scripts_core, scripts_errors, scripts_wire
from .scenarios import Scenario


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
        "raw-frames", scripts_errors.run_raw_frames,
        given={
            "setup": scripts_errors.SETUPS,
            "frames": FrameList,
            "provocation": ("none", "withhold-credit"),
            "shutdown_write": bool,
        },
        defaults={"provocation": "none", "shutdown_write": False},
        observations=("answer", "then", "header", "socket", "alive"),
    ),
    Scenario(
        "consume", scripts_core.run_consume,
        given={
            "messages": int, "range": int,
            "rcv_settle_mode": ("first", "second"), "snd_settle_mode": ("unsettled", "settled", "mixed"),
            "outcome": scripts_core.OUTCOMES, "settle": bool, "then": ("none", "accept"),
            "delivery_failed": bool, "undeliverable_here": bool, "annotations": dict,
            "condition": str, "description": str, "info": dict, "section_number": int, "section_offset": int,
        },
        defaults={"messages": 2, "range": 1, "rcv_settle_mode": "first", "snd_settle_mode": "unsettled",
                  "settle": True, "then": "none", "delivery_failed": False, "undeliverable_here": False},
        observations=("broker_attach", "transfer", "broker_dispositions", "settled_offsets", "after_accept",
                      "next_on_link", "remaining"),
    ),
    Scenario(
        "produce", scripts_core.run_produce,
        given={
            "snd_settle_mode": ("unsettled", "settled", "mixed"), "rcv_settle_mode": ("first", "second"),
            "transfers": list, "size": int,
            "provocation": ("none", "reject-publish", "release-publish", "modify-publish", "report-received"),
        },
        defaults={"snd_settle_mode": "unsettled", "rcv_settle_mode": "first", "provocation": "none", "size": 0},
        observations=("broker_attach", "dispositions", "progress", "ordering", "stored"),
    ),
    Scenario(
        "transfer", scripts_core.run_transfer,
        given={"kind": ("multi-frame-in", "multi-frame-out", "aborted-in", "tag-reuse", "whole",
                        "buffered-until-credit"), "size": int},
        defaults={"size": 0},
        observations=("shape", "dispositions", "stored", "intact", "before_credit", "after_credit"),
    ),
    Scenario(
        "wire-performatives", scripts_wire.run_wire_performatives,
        given={"side": ("broker", "peer"), "frame": scripts_wire.FRAMES},
        observations=("decoded", "bytes", "form"),
    ),
)

"""Scenarios of the core AMQP 1.0 catalogue (``core.*``, ``wire.performatives``): their given schema and observations.

Registered into :data:`scenarios.SCENARIOS` at the end of that module.
"""

from __future__ import annotations

from typing import Any

from amqp_conformance.peers.rawframes import check_spec

from . import scripts_core, scripts_errors
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


class Steps:
    """Schema of ``given.steps``: a non-empty list of step tables, each naming a known action."""

    @staticmethod
    def check_value(value: Any) -> str | None:
        """Why ``value`` is not a usable list of steps, or None."""
        if not isinstance(value, list) or not value:
            return "expected a non-empty list of step tables"
        for index, step in enumerate(value):
            problem = scripts_core.check_step(step)
            if problem:
                return f"step [{index}]: {problem}"
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
)

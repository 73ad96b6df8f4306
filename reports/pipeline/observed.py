"""Counts taken of a DataFrame while an action runs on it (an ``Observation``), and taken again when they do
not come back.

A local session's ``Observation.get`` waits until the action has reported its metrics. A Spark Connect server
does not: after a command (a write) it waits 100 ms for them (``Observation.getOrEmpty`` in Spark 4.0) and
sends none if the query listener has not delivered them by then, which happens on a loaded machine. The
client then holds an empty result. Then the counts come from one aggregation of the same DataFrame, which
costs a second pass over its input, but only in that case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from pyspark.sql import Column, DataFrame


class ObservationResult(Protocol):
    """What :func:`observed_counts` reads of an ``Observation`` (local or Connect): its ``get``."""

    @property
    def get(self) -> Mapping[str, Any]:
        """The metrics by name; empty, or lacking some, when none came back."""
        ...


class Counted(NamedTuple):
    """What :func:`observed_counts` found: the counts by name, and whether they had to be counted again."""

    counts: dict[str, int]
    recounted: bool


def named(counts: Mapping[str, Column]) -> list[Column]:
    """Each of ``counts``'s columns aliased to its name, for ``DataFrame.observe`` or ``DataFrame.agg``."""
    return [column.alias(name) for name, column in counts.items()]


def observed_counts(observation: ObservationResult, source: DataFrame, counts: Mapping[str, Column]) -> Counted:
    """``counts`` (name to aggregate column) as ``observation`` took them of ``source`` during an action that has
    ended; if any name is missing from what came back, every count is computed again by one aggregation of
    ``source``, and ``recounted`` says so. The same numbers either way: ``source`` must be the DataFrame that
    was observed, as it was before ``observe``."""
    got = observation.get
    if all(name in got for name in counts):
        return Counted({name: int(got[name]) for name in counts}, recounted=False)
    row = source.agg(*named(counts)).first()
    return Counted({name: int(row[name]) for name in counts}, recounted=True)

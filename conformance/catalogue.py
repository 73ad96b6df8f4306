"""The case catalogue: case tables (TOML, one file per source table) loaded and checked row by row.

A table names its source document and heading and the scenario that runs its rows. Each row names its
row number in the source, paraphrases it, states what is given and, per expectation set, what is
expected. A malformed row fails loading with :class:`TableError` naming the file, the row and the field.

A row whose source holds over several values of a given ("ANY" receiver settle mode, "FIRST OR SECOND") states
them in ``over`` (given key -> the values): it stands for one case per combination (:func:`expand_over`).
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from amqp_conformance.peers.matching import validate_pattern

from .scenarios import SCENARIOS

TABLES_DIR = Path(__file__).parent / "tables"
INTEROP_TABLES_DIR = Path(__file__).parent / "interop_tables"  # the client grid's rows (`interop`, not `run`)
EXPECTATION_SETS = ("core", "um-10.11", "router")
SEVERITIES = ("blocker", "critical", "normal", "minor", "trivial")
MAX_WATCH_S = 5.0
STATED_AS = "\x00stated-as"  # set by expand_over on the rows it makes (no TOML key can collide with it)


class TableError(ValueError):
    """A case table that cannot be used; the message names the file, row and field and what is wrong."""


@dataclass(frozen=True)
class Source:
    """Where a case comes from: the seed document (or specification section), the table heading, the row."""

    document: str
    heading: str
    row: str
    url: str | None = None

    def cite(self) -> str:
        """``000_ce67ac77056e886e.txt, "Accepted: Subscription Mapping", row 4`` (or the named section)."""
        where = f"row {self.row}" if self.row.isdigit() else self.row
        return f'{self.document}, "{self.heading}", {where}'


@dataclass(frozen=True)
class Case:
    """One row of a table: a stable id ``<table>/<row>``, its source, what is given and what is expected.

    ``expect`` maps an expectation set ("core", "um-10.11", "router") to the expected observations.
    ``informational`` names observations judged only for brokers whose profile has ``exact-encoding``;
    for other brokers a difference there is reported as INFO. ``requires`` names profile capabilities: the
    row's own, then those its scenario needs for the row's ``given`` (``store`` for a row that publishes to
    a node no consumer is attached to: :data:`.scenarios.STORE`).
    ``silent`` maps observations the source does not decide to a note saying so: the row's value there is
    what the reference does, and a difference is INFO for every broker (the reference included).
    ``premise`` (grid rows only) maps observations to the patterns a cell must show for it to have exercised what
    the row is about, where that rests on a choice a client's library makes (how it splits a message, say): a
    cell that passed without showing them tells nothing of the row and is UNSUPPORTED (fixtures/interop.py
    ``held_to_premise``); a FAIL, an ERROR or a NON-STRICT stands.
    ``stated_as`` is the id of the table row the case comes from (itself, or the row whose ``over`` it is one
    combination of).
    """

    id: str
    table: str
    row: str
    title: str
    text: str
    scenario: str
    source: Source
    given: dict[str, Any]
    expect: dict[str, dict[str, Any]]
    requires: tuple[str, ...] = ()
    informational: tuple[str, ...] = ()
    severity: str = "normal"
    file: str = ""
    silent: dict[str, str] = field(default_factory=dict)
    # seconds the consumer that observes what is left on the node (``remaining``) watches by the clock, even
    # when the broker says it is idle: an effect the source forbids may come late (a rejected message put
    # back later); 0: no floor
    watch: float = 0.0
    premise: dict[str, Any] = field(default_factory=dict)
    # the id of the table row this case comes from: its own row, or for a combination of that row's ``over``
    # values (:func:`expand_over`) the row that states them
    stated_as: str = ""

    @property
    def expectation_sets(self) -> list[str]:
        """The expectation sets this row states expectations for, in catalogue order."""
        return [s for s in EXPECTATION_SETS if s in self.expect]


@dataclass
class Catalogue:
    """All cases, in table-file order then row order."""

    cases: list[Case] = field(default_factory=list)

    def by_table(self, table: str) -> list[Case]:
        """The cases of one table; raises KeyError naming the known tables if there is none."""
        found = [c for c in self.cases if c.table == table]
        if not found:
            raise KeyError(f"no case table {table!r}; known: {sorted({c.table for c in self.cases})}")
        return found

    def get(self, case_id: str) -> Case:
        """The case with this id."""
        for case in self.cases:
            if case.id == case_id:
                return case
        raise KeyError(f"no case {case_id!r}")


@cache
def load_catalogue(directory: Path = TABLES_DIR, interop: bool = False) -> Catalogue:
    """Load and check every ``*.toml`` table in ``directory`` (cached per directory); ``interop``: the tables
    are the client grid's, checked against :data:`.interop_scenarios.INTEROP_SCENARIOS`."""
    catalogue = Catalogue()
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        for case in load_table(path, interop):
            if case.id in seen:
                raise TableError(f"{path.name}: row {case.row}: case id {case.id!r} already defined in {seen[case.id]}")
            seen[case.id] = path.name
            catalogue.cases.append(case)
    return catalogue


def load_interop_catalogue() -> Catalogue:
    """The interoperability grid's rows (``conformance/interop_tables``), loaded and checked like the catalogue."""
    return load_catalogue(INTEROP_TABLES_DIR, interop=True)


def all_cases() -> dict[str, Case]:
    """Every case by id: the catalogue's and the grid's (what a profile's deviation may name)."""
    return {case.id: case for case in (*load_catalogue().cases, *load_interop_catalogue().cases)}


def scenario_of(case: Case) -> Any:
    """The :class:`~.scenarios.Scenario` that runs ``case`` (a catalogue or a grid scenario)."""
    from .interop_scenarios import INTEROP_SCENARIOS

    return SCENARIOS.get(case.scenario) or INTEROP_SCENARIOS[case.scenario]


def load_table(path: Path, interop: bool = False) -> list[Case]:
    """Load one table file; raises :class:`TableError` on the first problem found. ``interop``: a grid table
    (its scenario one of :data:`.interop_scenarios.INTEROP_SCENARIOS`)."""
    from .interop_scenarios import INTEROP_SCENARIOS

    scenarios = INTEROP_SCENARIOS if interop else SCENARIOS
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TableError(f"{path.name}: not valid TOML: {exc}") from None
    where = path.name
    table = _require(data, "table", str, where)
    title = _require(data, "title", str, where)
    scenario_name = _require(data, "scenario", str, where)
    if scenario_name not in scenarios:
        raise TableError(f"{where}: field 'scenario': {scenario_name!r} is not a known scenario "
                         f"(known: {', '.join(sorted(scenarios))})")
    scenario = scenarios[scenario_name]
    source = _require(data, "source", dict, where)
    document = _require(source, "document", str, where, "source.")
    heading = _require(source, "heading", str, where, "source.")
    rows = _require(data, "row", list, where)
    if not rows:
        raise TableError(f"{where}: the table has no [[row]] entries")
    cases = []
    for index, row in enumerate(rows, start=1):
        row_where = f"{where}: row {row.get('row', f'#{index}')}" if isinstance(row, dict) else f"{where}: row #{index}"
        if not isinstance(row, dict):
            raise TableError(f"{row_where}: a row must be a table of fields")
        cases.extend(_load_row(one, f"{where}: row {one.get('row')}" if "over" in row else row_where, path, table,
                               title, scenario_name, scenario, document, heading, source.get("url"), interop)
                     for one in expand_over(row, row_where))
    clash = next((case_id for case_id, n in Counter(case.id for case in cases).items() if n > 1), None)
    if clash:
        raise TableError(f"{where}: two rows have the id {clash.split('/', 1)[1]!r} (a row's over names its "
                         "combinations <row>-<value>-<value>...: rename one)")
    return cases


def expand_over(row: dict, where: str) -> list[dict]:
    """The row as one row per combination of its ``over`` values (itself when it has none).

    ``over`` maps given keys to the values the source row holds for (every one, so that a broker right on one
    and wrong on another is told). The row's own ``given`` names one value of each key: that combination keeps
    the row's id; every other is a row of its own, ``<row>-<value>-<value>...`` (values in ``over``'s key order),
    with the same text, expectations and everything else, and ``given`` set to the combination."""
    if "over" not in row:
        return [row]
    over, given = row["over"], row.get("given")
    if not isinstance(over, dict) or not over:
        raise TableError(f"{where}: field 'over': expected a table of given key = [the values the source row "
                         f"holds for], got {over!r}")
    if not isinstance(given, dict):
        return [row]  # _load_row names the missing or malformed given
    for key, values in over.items():
        if not isinstance(values, list) or len(values) < 2 or len(set(map(str, values))) != len(values) \
                or not all(isinstance(value, (str, int)) for value in values):
            raise TableError(f"{where}: field 'over.{key}': expected a list of two or more distinct values (strings, "
                             f"numbers or booleans: each names its cases), got {values!r}")
        if key not in given or given[key] not in values:
            raise TableError(f"{where}: field 'over.{key}': the row's given must name one of {values!r} for "
                             f"{key!r} (that combination keeps the row's id)")
    combinations = [{}]
    for key, values in over.items():
        combinations = [{**combination, key: value} for combination in combinations for value in values]
    rows = []
    for combination in combinations:
        one = {k: v for k, v in row.items() if k != "over"}
        one["given"] = {**given, **combination}
        one[STATED_AS] = row.get("row")
        if any(given[key] != value for key, value in combination.items()):
            one["row"] = "-".join([str(row.get("row")), *(str(value) for value in combination.values())])
        rows.append(one)
    return rows


def _load_row(row: dict, where: str, path: Path, table: str, title: str, scenario_name: str, scenario: Any,
              document: str, heading: str, url: str | None, interop: bool = False) -> Case:
    # heading: the row's own section, where one table spans several (core.errors); watch: see Case.watch;
    # premise: see Case.premise (a grid row's; the catalogue's peer makes its own choices, so it has none)
    known = {"row", "source_row", "title", "text", "given", "expect", "requires", "informational", "severity",
             "silent", "heading", "watch", *(("premise",) if interop else ())}
    unknown = set(row) - known - {STATED_AS}
    if unknown:
        raise TableError(f"{where}: unknown field(s) {sorted(unknown)} (fields: {', '.join(sorted(known))})")
    row_id = str(_require(row, "row", (str, int), where))
    source_row = str(_require(row, "source_row", (str, int), where))
    text = _require(row, "text", str, where)
    given = dict(scenario.defaults)
    given.update(_require(row, "given", dict, where))
    for key, value in given.items():
        problem = scenario.check_given(key, value)
        if problem:
            raise TableError(f"{where}: field 'given.{key}': {problem}")
    problem = scenario.check_row(given) if scenario.check_row else None
    if problem:
        raise TableError(f"{where}: field 'given': {problem}")
    expect = _require(row, "expect", dict, where)
    if not expect:
        raise TableError(f"{where}: field 'expect': states no expectation set (one of {', '.join(EXPECTATION_SETS)})")
    for set_name, expected in expect.items():
        if set_name not in EXPECTATION_SETS:
            raise TableError(f"{where}: field 'expect.{set_name}': unknown expectation set "
                             f"(known: {', '.join(EXPECTATION_SETS)})")
        _check_observations(expected, f"expect.{set_name}", where, scenario_name, scenario)
    premise = row.get("premise", {})
    if "premise" in row:
        _check_observations(premise, "premise", where, scenario_name, scenario)
    informational = tuple(row.get("informational", ()))
    for key in informational:
        if key not in scenario.observations:
            raise TableError(f"{where}: field 'informational': {key!r} is not an observation of {scenario_name!r}")
    silent = row.get("silent", {})
    if not isinstance(silent, dict):
        raise TableError(f"{where}: field 'silent': expected a table of observation = \"what the source leaves open\"")
    for key, note in silent.items():
        if key not in scenario.observations:
            raise TableError(f"{where}: field 'silent.{key}': {key!r} is not an observation of {scenario_name!r}")
        if not isinstance(note, str) or not note.strip():
            raise TableError(f"{where}: field 'silent.{key}': give a note saying what the source leaves open")
    watch = row.get("watch", 0.0)
    if isinstance(watch, bool) or not isinstance(watch, (int, float)) or not 0 < watch <= MAX_WATCH_S:
        if "watch" in row:
            raise TableError(f"{where}: field 'watch': expected seconds, more than 0 and at most {MAX_WATCH_S} "
                             f"(how long the consumer observing what is left watches), got {watch!r}")
    severity = row.get("severity", "normal")
    if severity not in SEVERITIES:
        raise TableError(f"{where}: field 'severity': {severity!r} is not one of {', '.join(SEVERITIES)}")
    return Case(
        id=f"{table}/{row_id}", table=table, row=row_id, title=row.get("title", title), text=text,
        scenario=scenario_name, source=Source(document, str(row.get("heading", heading)), source_row, url), given=given,
        expect={k: expect[k] for k in EXPECTATION_SETS if k in expect},
        requires=tuple(dict.fromkeys((*row.get("requires", ()), *scenario.needs(given)))),
        informational=informational, severity=severity, file=path.name,
        silent=dict(silent), watch=float(watch), premise=dict(premise),
        stated_as=f"{table}/{row.get(STATED_AS, row_id)}",
    )


def _check_observations(patterns: Any, name: str, where: str, scenario_name: str, scenario: Any) -> None:
    """Raise :class:`TableError` unless ``patterns`` (a row's field ``name``: an expectation set, its premise) is a
    non-empty table whose keys the scenario observes and whose values are valid patterns."""
    if not isinstance(patterns, dict) or not patterns:
        raise TableError(f"{where}: field '{name}': must be a non-empty table of observations")
    for key, pattern in patterns.items():
        if key not in scenario.observations:
            raise TableError(f"{where}: field '{name}.{key}': scenario {scenario_name!r} does not "
                             f"observe {key!r} (it observes: {', '.join(scenario.observations)})")
        problems = validate_pattern(pattern, f"{name}.{key}")
        if problems:
            raise TableError(f"{where}: field '{problems[0].split(':')[0]}': {problems[0].split(': ', 1)[1]}")


def _require(data: dict, key: str, kind: type | tuple[type, ...], where: str, prefix: str = "") -> Any:
    if key not in data:
        raise TableError(f"{where}: missing field '{prefix}{key}'")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TableError(f"{where}: field '{prefix}{key}': expected {names}, got {type(value).__name__} {value!r}")
    return value

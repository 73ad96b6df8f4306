"""Automated mutation testing of the reference broker: mutmut 3 mutates its protocol code, the catalogue judges.

One command, from a fresh clone (after ``pip install -e '.[dev]'``, which brings mutmut)::

    python scripts/mutation.py [--module broker ...] [--max-children N] [--out DIR] [--limit N]

Every mutant of the protocol modules of ``peers/reference/`` (:data:`PROTOCOL_MODULES`) is run against the catalogue
on the embedded reference broker (``--broker reference``); the mutants of the modules the router mode runs that
survive that are run again against ``--broker reference-router`` (the router tables). Then every survivor is run
once more against the conformant variant that makes each free choice the other way (``variant-every-choice``, and
``variant-router-every-choice`` for the router's modules; see ``peers/reference/conformant_variants.py``): a mutant
whose broken guarantee the reference's own choices hide (its handles, channels, credit, frame size) is caught there,
as it would be in a broker that chose otherwise. The SASL layer's survivors last go against
``variant-client-certificate`` (over TLS, verifying the client's certificate: the catalogue authenticates with
EXTERNAL). Last, ``broker.py``'s survivors go to the client grid's cells (python-proton with itself, against the
embedded reference, the broker mutated in the test process) of the rows that ask the admin for a provocation no
catalogue row asks for, or asks for in another combination (:data:`GRID_PROVOCATIONS`). A mutant is **killed** when a
case FAILs or ERRORs against it (or its run times out or crashes), **survives** when every case passes, and is
**uncovered** when no case runs its code. It prints the score per module and per table (the table of the first case
that killed each mutant), every survivor with its diff and its triage (``docs/mutation-triage/<module>.toml``), and
how long it took; it writes ``DIR/mutation.json`` and ``DIR/survivors.md``. The score is killed / (all - equivalent
- source-silent): a survivor triaged ``equivalent`` cannot be killed by any broker behaviour, and one triaged
``source-silent`` differs only where the source documents leave the behaviour open (a row that killed it would FAIL
a conformant broker), so both are left out; ``open`` survivors count against it. The strict figure, killed / (all -
equivalent), is printed beside it.

Why mutmut 3: it forks one warmed-up pytest process per mutant and runs only the cases that reach the mutated
function (it records which test reaches which function once), so the catalogue judges ~2,000 mutants in
minutes on two cores; cosmic-ray rewrites files on disk and starts the whole catalogue per mutant (about 4 s
each, hours for the same set). mutmut names modules by path, so the run happens in a work directory that lays
the sources out under ``amqp_conformance/`` (the import namespace the installed distribution maps them to).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("peers", "fixtures", "reports", "conformance")
# the reference broker's protocol code: what a broker under test could get wrong, its SASL layer included
# (core.sasl judges it; not by default yet, below). Left out: server.py (the socket loop: the catalogue does
# not judge it, the own tests do),
# selector.py (a JMS selector evaluator: no source document states a guarantee about selector semantics,
# the UM rows use a selector only as the "bad selector" provocation; peers/tests/test_um_selector.py tests
# it), faults.py (the fault switches) and the test doubles (mutant_kit.py, mutants*.py, router_mutants.py,
# fault_variants.py).
PROTOCOL_MODULES = ("broker", "guard", "outcomes", "store", "router", "um_rules", "transactions", "acl",
                    "policed", "sasl")
# a module added here is measured only when asked for (--module NAME) until its survivors are triaged: a default
# run must stay fully triaged (sasl was, from its first measure on 27 Nov 2026 until its triage that afternoon)
UNTRIAGED_MODULES: tuple[str, ...] = ()
DEFAULT_MODULES = tuple(m for m in PROTOCOL_MODULES if m not in UNTRIAGED_MODULES)
# the modules the router mode runs: their survivors against the broker are run again against the router
ROUTER_MODULES = ("router", "broker", "outcomes", "store")


# the provocations of the reference's admin that only client-grid rows ask for, and the client whose cells run them;
# credit-one-at-a-time also core.transfer/aborted-consumes-credit, which is UNSUPPORTED where the next credit never
# comes: interop.outcomes/credit-one-at-a-time FAILs there (a broker that stops topping up its publishers);
# abort-first-delivery also core.flow/drain-after-an-aborted-delivery (with a drain; the grid's row without one)
GRID_PROVOCATIONS = ("credit-one-at-a-time", "settle-without-outcome", "settle-after-outcome", "drain-publishers",
                     "close-publisher-connection", "drop-publisher-connection", "end-publisher-session",
                     "fail-publisher-connection", "abort-first-delivery")
GRID_CLIENT = "python-proton"
GRID_CELLS = "client_mutation_cells.py"  # copied into a client-grid pass's work directory as GRID_TEST
GRID_TEST = "test_grid_cells.py"


@dataclass(frozen=True)
class Pass:
    """One run of mutmut: the catalogue against ``broker`` (as conformant ``variant`` of it, when given), over
    the mutants of ``modules``; every pass after the first runs only the survivors of the passes before it.
    ``tables``, when given, is a pytest ``-k`` expression: the pass runs only those tables' cases."""

    label: str
    broker: str
    modules: tuple[str, ...]
    variant: str | None = None
    tables: str | None = None
    grid: tuple[str, ...] = ()  # instead of the catalogue: the client grid's rows that ask for these provocations

    def environment(self) -> dict[str, str]:
        """What the pass's test process needs in its environment: for a client-grid pass, the cells' knobs
        (scripts/client_mutation_cells.py: :data:`GRID_CLIENT` as built, the pass's provocations, its broker)."""
        if not self.grid:
            return {}
        from amqp_conformance.peers.toolchain import cache_root

        return {"AMQP_CLIENT_MUTATION_CLIENT": GRID_CLIENT, "AMQP_CLIENT_MUTATION_LIBRARY": "installed",
                "AMQP_CLIENT_MUTATION_PROVOCATIONS": ",".join(self.grid),
                "AMQP_CLIENT_MUTATION_BROKERS": self.against, "AMQP_CLIENT_MUTATION_SHIMS": str(cache_root() / "shims")}

    @property
    def against(self) -> str:
        """The broker as the report names it: ``reference-router``, ``reference~variant-every-choice``."""
        return f"{self.broker}~{self.variant}" if self.variant else self.broker


PASSES = (
    Pass("reference", "reference", PROTOCOL_MODULES),
    Pass("reference-router", "reference-router", ROUTER_MODULES),
    Pass("variant-every-choice", "reference", PROTOCOL_MODULES, "variant-every-choice"),
    Pass("variant-router-every-choice", "reference-router", ROUTER_MODULES, "variant-router-every-choice"),
    # the SASL layer's EXTERNAL path runs only over TLS with a client certificate; no other module's code differs
    # there, so only sasl's survivors go, and only to the tables that log in themselves: core.sasl (raw, every
    # credential) and wire.performatives (proton's client, a whole conversation). Over TLS the idle probe cannot
    # meter the client's bytes, so the whole catalogue takes a minute a mutant, past mutmut's wall-clock limit
    # (half its CPU limit, 16 s when the recorded test times are near 0)
    Pass("variant-client-certificate", "reference", ("sasl",), "variant-client-certificate",
         "core.sasl or wire.performatives"),
    # the admin's provocations that only the client grid asks for (to judge a client: fixtures/admin.py), which no
    # catalogue row reaches: broker.py's survivors go to those rows' cells, python-proton with itself
    Pass("client-grid", "reference", ("broker",), grid=GRID_PROVOCATIONS),
)
TRIAGE_DIR = REPO / "docs" / "mutation-triage"  # one <module>.toml a module, so work on modules never collides
TRIAGE_CATEGORIES = {
    "equivalent": "no broker behaviour differs: no row can kill it (left out of the score)",
    "source-silent": "the behaviour differs only where the sources leave it open (cited): left out of the score, "
                     "counted in the strict figure",
    "open": "a real gap: a row should kill it (named): counted as a survivor",
}
# what a source-silent reason must cite: a section of AMQP 1.0 (2.8.14, part 4), a seed (000, "seed 001", the UM
# 10.11 guide), or that no source speaks of it at all
SOURCE_CITATION = re.compile(r"\b\d\.\d+(\.\d+)?\b|\bpart \d\b|\bseed 00\d\b|\b00\d_[0-9a-f]+|\bUM 10\.11\b|"
                             r"\bno source\b|\bnone of the catalogue's source documents\b", re.IGNORECASE)
# mutmut bounds a mutant's run at (the tests' time + timeout_constant) x timeout_multiplier (15) of wall time (half its
# CPU limit), the tests' time taken from their call phase alone. The catalogue's cases do their work in fixtures, so
# that estimate is about 0 and mutmut's default constant (1 s) bounds every mutant's run at about 15 s: the whole
# catalogue against the reference takes about 8 s, but against variant-every-choice about 16 s (its late drain
# answers and stated flows), and two side by side take longer, so an unbroken mutant timed out there and was counted
# killed (62 of 95 survivors in one pass, 4 Dec 2026). 5 s bounds a run at about 75 s: above any pass's whole
# catalogue, and a mutant that hangs every case (2 s each) still ends as a time-out.
TIMEOUT_CONSTANT_S = 5.0
KILLED_STATUSES = {"killed", "timeout", "segfault", "suspicious"}
RECORDER_MODULE = "amqp_mutation_recorder"  # a pytest plugin (-p) on mutmut's sys.path
KILLS_PLUGIN = "mutation_kills"  # scripts/mutation_kills.py: which case failed against which mutant
RECORDER = '''"""Written by scripts/mutation.py: credits the functions reached at session start to every case.

While mutmut collects its stats (which case reaches which function), the functions reached by the time the
first case is set up (the session-scoped broker starting: constructors, configuration) are credited to every
case: mutmut would credit them to the first case alone and judge their mutants with that one case.
"""
import os

import pytest

_ITEMS = []
_AT_SESSION_START = set()


def _collecting_stats():
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


def pytest_collection_modifyitems(session, config, items):
    _ITEMS[:] = [item.nodeid for item in items]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield
    if _collecting_stats() and _ITEMS and item.nodeid == _ITEMS[0]:
        from mutmut.state import state
        _AT_SESSION_START.update(state()._stats)


def pytest_sessionfinish(session, exitstatus):
    if not (_collecting_stats() and _AT_SESSION_START):
        return
    from mutmut.state import state
    from mutmut.utils.format_utils import strip_prefix
    every = {strip_prefix(nodeid, prefix="mutants/") for nodeid in _ITEMS}
    for function in _AT_SESSION_START:
        state().tests_by_mangled_function_name[function].update(every)

'''


class TriageError(ValueError):
    """The triage file is malformed; the message names the entry and the field."""


@dataclass
class MutantResult:
    """One mutant: its name, module, status after every run, the case that killed it, and its triage."""

    name: str
    module: str
    status: str
    killed_by: str | None = None
    triage: dict[str, str] | None = None
    diff: str = ""

    @property
    def killed(self) -> bool:
        """True when some case FAILed or ERRORed against it, or its run timed out or crashed."""
        return self.status in KILLED_STATUSES


@dataclass
class Score:
    """Counts over a set of mutants, the score (killed / (all - equivalent - source-silent)) and the strict
    figure (killed / (all - equivalent))."""

    total: int = 0
    killed: int = 0
    equivalent: int = 0
    silent: int = 0
    survivors: list[str] = field(default_factory=list)  # every survivor not equivalent (open, silent, untriaged)

    @property
    def score(self) -> float:
        """The fraction killed of the mutants a correct catalogue can kill: neither equivalent nor differing only
        where the sources are silent (1.0 when there are none)."""
        counted = self.total - self.equivalent - self.silent
        return self.killed / counted if counted else 1.0

    @property
    def strict(self) -> float:
        """The fraction killed of the non-equivalent mutants, source-silent ones counted as survivors."""
        counted = self.total - self.equivalent
        return self.killed / counted if counted else 1.0


def module_of(mutant: str) -> str:
    """The module a mutant is of, the last part of its dotted path before mutmut's mangled function name:
    ``amqp_conformance.peers.reference.broker.xǁBrokerǁf__mutmut_3`` -> ``broker``,
    ``clientlib.proton._delivery.xǁDeliveryǁsettle__mutmut_1`` -> ``_delivery``; '' when it has none."""
    parts = mutant.split(".")
    for index, part in enumerate(parts):
        if index and (part.startswith("x_") or part.startswith("xǁ")):
            return parts[index - 1]
    return ""


def table_of(case: str) -> str:
    """The table of a pytest node id of the catalogue (``test_core.py::test_case[core.outcomes/x:core]``)."""
    match = re.search(r"\[([^/\]]+)/", case)
    return match.group(1) if match else case


def pass_of(killed_by: str) -> str:
    """The broker of the pass a kill was made in, when not the first (``… against reference-router``), or ''."""
    return killed_by.rpartition(" against ")[2] if " against " in killed_by else ""


def mutmut_module_of(name: str) -> str:
    """The module of a mutmut mutant name (:func:`module_of`); '' when ``name`` is not one."""
    return module_of(name) if "__mutmut_" in name else ""


def load_triage(directory: Path = TRIAGE_DIR,
                module_of_name: Callable[[str], str] = mutmut_module_of) -> dict[str, dict[str, str]]:
    """The triaged survivors by mutant name, from every ``<module>.toml`` of ``directory``; raises
    :class:`TriageError` naming a malformed entry (or one filed under another module's file). ``module_of_name``:
    the module a mutant name is of, '' for a name the mutation tool does not make (mutmut's by default)."""
    triage: dict[str, dict[str, str]] = {}
    for path in sorted(directory.glob("*.toml")):
        triage.update(_load_triage_file(path, triage, module_of_name))
    return triage


def _load_triage_file(path: Path, seen: dict[str, dict[str, str]],
                      module_of_name: Callable[[str], str]) -> dict[str, dict[str, str]]:
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("mutant", [])
    except tomllib.TOMLDecodeError as exc:
        raise TriageError(f"{path.name}: not TOML: {exc}") from exc
    triage: dict[str, dict[str, str]] = {}
    for index, entry in enumerate(entries):
        where = f"{path.name}: [[mutant]] #{index + 1}"
        unknown = set(entry) - {"name", "category", "reason", "diff"}
        if unknown:
            raise TriageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
                              "(known: name, category, reason, diff)")
        if "diff" in entry and (not isinstance(entry["diff"], str) or not entry["diff"].strip()):
            raise TriageError(f"{where}: 'diff' (the mutant's diff the entry was written for), when given, must be a "
                              "non-empty string")
        for key in ("name", "category", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise TriageError(f"{where}: '{key}' must be a non-empty string")
        if entry["category"] not in TRIAGE_CATEGORIES:
            raise TriageError(f"{where} ({entry['name']}): unknown category {entry['category']!r} "
                              f"(known: {', '.join(TRIAGE_CATEGORIES)})")
        if entry["category"] == "source-silent" and not SOURCE_CITATION.search(entry["reason"]):
            raise TriageError(f"{where} ({entry['name']}): a source-silent reason must cite the source that leaves "
                              f"the behaviour open (a section such as 2.8.14, a seed such as 000, or 'no source')")
        module = module_of_name(entry["name"])
        if not module:
            raise TriageError(f"{where}: {entry['name']!r} is not a mutant name of this mutation tool")
        if module != path.stem:
            raise TriageError(f"{where}: {entry['name']} is a mutant of {module}, filed in {path.name}")
        if entry["name"] in triage or entry["name"] in seen:
            raise TriageError(f"{where}: {entry['name']} is triaged twice")
        triage[entry["name"]] = entry
    return triage


def score(results: list[MutantResult]) -> Score:
    """Counts and scores over ``results``: equivalent survivors left out of both, source-silent ones of the score."""
    counts = Score(total=len(results))
    for result in results:
        if result.killed:
            counts.killed += 1
        elif result.triage and result.triage["category"] == "equivalent":
            counts.equivalent += 1
        else:
            counts.silent += bool(result.triage and result.triage["category"] == "source-silent")
            counts.survivors.append(result.name)
    return counts


def stale_triage(triage: dict[str, dict[str, str]], results: list[MutantResult],
                 module_of_name: Callable[[str], str] = module_of) -> list[str]:
    """Triaged names that are no longer surviving mutants of the modules run (killed now, or renamed);
    ``module_of_name``: the module a triaged name is of (mutmut's naming by default)."""
    run_modules = {r.module for r in results}
    surviving = {r.name for r in results if not r.killed}
    return sorted(name for name in triage if module_of_name(name) in run_modules and name not in surviving)


def survivor_diffs(path: Path) -> dict[str, str]:
    """The survivors' diffs of a report's ``survivors.md`` by mutant name (empty when there is no such file)."""
    if not path.is_file():
        return {}
    diffs = {}
    for block in re.split(r"^## ", path.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        head, _, rest = block.partition("\n")
        found = re.search(r"```diff\n(.*?)```", rest, re.DOTALL)
        diffs[head.split(" ")[0]] = found.group(1) if found else ""
    return diffs


def diff_key(diff: str) -> str:
    """A mutant's diff without what renumbering changes: its ``@@`` line positions and mutmut's numbers."""
    lines = [line for line in diff.strip().splitlines() if not line.startswith("@@")]
    return re.sub(r"__mutmut_\d+", "__mutmut_N", "\n".join(lines))


def changed_lines_key(diff: str) -> str:
    """A mutant's :func:`diff_key` reduced to the lines it takes away and puts in (``-`` and ``+``, without the
    file names): what stays the same when only the code around the mutated line changed."""
    return "\n".join(line for line in diff_key(diff).splitlines()
                     if line.startswith(("-", "+")) and not line.startswith(("--- ", "+++ ")))


def function_of(mutant: str) -> str:
    """The mutated function a mutant's name names (mutmut's name without its ``__mutmut_N`` number)."""
    return mutant.rsplit("__mutmut_", 1)[0]


@dataclass
class CarryOver:
    """Triage entries to carry over to renumbered mutants: ``moves`` (triaged name -> the surviving mutant
    whose diff is the one that entry was written for), ``by_changed_lines`` (the entries, by the name they take,
    matched by the lines their mutant changes alone: the code around it changed, so each reason is to be read
    again) and ``unmatched`` (entries whose own mutant now has another diff, or is gone, and whose diff no
    survivor has: to triage again by hand)."""

    moves: dict[str, str] = field(default_factory=dict)
    by_changed_lines: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)


def carry_over(triage: dict[str, dict[str, str]], results: list[MutantResult],
               previous: dict[str, str]) -> CarryOver:
    """Match triage entries to this run's survivors by diff (:func:`diff_key`): the diff an entry records
    (its ``diff``, :func:`record_triage_diffs`), else the ``previous`` report's (:func:`survivor_diffs`).
    mutmut numbers a function's mutants in order, so a change to a mutated function renames its survivors, and
    an entry may now name a killed mutant, or another survivor. An entry moves to the survivor (same module)
    that has the diff it was written for, unless its own name still has that diff.

    A change near a mutated line changes the diff's context lines too. An entry no survivor's whole diff matches
    is then matched by the lines it changes (:func:`changed_lines_key`), in the same function only, and only when
    one survivor not matched already has them (its own mutant first): it keeps or takes that name, is listed in
    ``by_changed_lines``, and :func:`record_triage_diffs` writes its new diff."""
    run_modules = {r.module for r in results}
    survivors = {r.name: diff_key(r.diff) for r in results if not r.killed}
    changed_lines = {r.name: changed_lines_key(r.diff) for r in results if not r.killed}
    written = {name: entry.get("diff") or previous[name] for name, entry in triage.items()
               if (entry.get("diff") or name in previous) and module_of(name) in run_modules}
    written_for = {name: diff_key(diff) for name, diff in written.items()}
    wanted = [name for name, key in written_for.items() if survivors.get(name) != key]
    settled = {name for name, key in written_for.items() if survivors.get(name) == key}
    by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, key in sorted(survivors.items()):
        if name not in settled:
            by_key[(module_of(name), key)].append(name)
    carry = CarryOver()
    left = []
    for name in sorted(wanted):
        candidates = by_key.get((module_of(name), written_for[name]), [])
        if candidates:
            carry.moves[name] = candidates.pop(0)
        else:
            left.append(name)
    claimed = settled | set(carry.moves.values())
    for name in left:
        lines = changed_lines_key(written[name])
        same = [s for s in sorted(changed_lines) if function_of(s) == function_of(name) and s not in claimed
                and changed_lines[s] == lines]
        found = name if name in same else same[0] if len(same) == 1 else None
        if found is None:
            carry.unmatched.append(name)
            continue
        claimed.add(found)
        carry.by_changed_lines.append(found)
        if found != name:
            carry.moves[name] = found
    while True:  # a move onto a name whose own entry stays would triage that mutant twice: drop it
        blocked = [old for old, new in carry.moves.items() if new in triage and new not in carry.moves]
        if not blocked:
            break
        for old in blocked:
            carry.by_changed_lines = [n for n in carry.by_changed_lines if n != carry.moves[old]]
            del carry.moves[old]
            carry.unmatched.append(old)
    carry.by_changed_lines.sort()
    carry.unmatched.sort()
    return carry


def apply_carry_over(moves: dict[str, str], directory: Path = TRIAGE_DIR) -> int:
    """Rename the entries of ``moves`` in the triage files of ``directory`` (all at once, so a swap or a chain
    of renames comes out right); returns the number of entries renamed."""
    renamed = 0
    for path in sorted(directory.glob("*.toml")):
        text = path.read_text(encoding="utf-8")

        def rename(match: re.Match) -> str:
            nonlocal renamed
            old = match.group(2)
            if old not in moves:
                return match.group(0)
            renamed += 1
            return f'{match.group(1)}"{moves[old]}"'

        changed = re.sub(r'^(name\s*=\s*)"([^"]+)"', rename, text, flags=re.MULTILINE)
        if changed != text:
            path.write_text(changed, encoding="utf-8")
    return renamed


def record_triage_diffs(diffs: dict[str, str], directory: Path = TRIAGE_DIR) -> int:
    """Write into each entry of ``directory``'s triage files named in ``diffs`` that mutant's diff (its
    :func:`diff_key`, as the entry's ``diff``, after its other fields), replacing a diff it held; every other
    line stays as written. An entry that records its diff is carried over to a renumbered mutant with no earlier
    report at hand (a fresh clone). Returns how many entries changed."""
    changed = 0
    for path in sorted(directory.glob("*.toml")):
        head, *blocks = re.split(r"^\[\[mutant\]\]\n", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        written = []
        for block in blocks:
            entry = tomllib.loads(block)
            key = diffs.get(entry.get("name", ""))
            if key is not None and diff_key(entry.get("diff", "")) != diff_key(key):
                body = re.sub(r"^diff = (?:'''.*?'''|\"(?:[^\"\\\n]|\\.)*\")\n", "", block,
                              flags=re.MULTILINE | re.DOTALL)
                kept, gap = body.rstrip("\n"), body[len(body.rstrip("\n")):] or "\n"
                block = f"{kept}\ndiff = {_toml_text(diff_key(key))}\n{gap[1:]}"
                changed += 1
            written.append(block)
        if written != blocks:
            path.write_text(head + "".join("[[mutant]]\n" + b for b in written), encoding="utf-8")
    return changed


def diffs_to_record(results: list[MutantResult], unmatched: list[str],
                    stale: list[str]) -> tuple[dict[str, str], list[str]]:
    """The diffs :func:`record_triage_diffs` may write (by mutant name), and the entries it may not. A triaged
    survivor's entry gets its diff unless the entry was left to triage again (``unmatched``), or it records no diff
    of its own while its module has ``stale`` entries: a function's mutants were renumbered there, and an entry
    with no diff to match by may now name another survivor than the one it was written for."""
    renumbered = {module_of(name) for name in stale}
    diffs: dict[str, str] = {}
    unchecked: list[str] = []
    for result in results:
        if result.killed or not result.triage or result.name in unmatched:
            continue
        if "diff" not in result.triage and result.module in renumbered:
            unchecked.append(result.name)
        else:
            diffs[result.name] = result.diff
    return diffs, unchecked


def _toml_text(text: str) -> str:
    """``text`` as a TOML string: a multi-line literal string, or a basic one (JSON's escapes are TOML's) when
    ``text`` holds the literal string's closing quotes."""
    return json.dumps(text, ensure_ascii=False) if "'''" in text else f"'''\n{text}\n'''"


# -- the run ------------------------------------------------------------------------------------------


def build_workdir(workdir: Path, modules: list[str], broker: str, variant: str | None = None,
                  tables: str | None = None, grid: bool = False) -> None:
    """Lay the sources out under ``workdir/amqp_conformance/`` with mutmut's configuration and the recorder; the
    catalogue (only the cases ``tables`` selects, a ``-k`` expression, when given) runs against ``broker``, or its
    conformant ``variant`` when given; with ``grid``, the client grid's cells instead (scripts/client_mutation_cells.py
    as :data:`GRID_TEST`, chosen by :meth:`Pass.environment`)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    package = workdir / "amqp_conformance"
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(REPO / folder, package / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "tests", "*.pyc"))
    sources = [f"amqp_conformance/peers/reference/{m}.py" for m in modules]
    plugins = ["-p", RECORDER_MODULE, "-p", KILLS_PLUGIN, "-p", "no:cacheprovider", "--import-mode=importlib"]
    catalogue = ["--broker", broker, *(["--reference-mutant", variant] if variant else []), *plugins,
                 "--case-timeout", "2", *(["-k", tables] if tables else [])]
    config = {
        "timeout_constant": TIMEOUT_CONSTANT_S,
        "source_paths": sources,
        "also_copy": ["amqp_conformance", f"{RECORDER_MODULE}.py", f"{KILLS_PLUGIN}.py",
                      *([GRID_TEST] if grid else [])],
        "pytest_add_cli_args_test_selection": [GRID_TEST if grid else "amqp_conformance/conformance/"],
        "pytest_add_cli_args": plugins if grid else catalogue,
    }
    lines = ["[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    (workdir / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (workdir / f"{RECORDER_MODULE}.py").write_text(RECORDER, encoding="utf-8")
    shutil.copy2(Path(__file__).resolve().parent / f"{KILLS_PLUGIN}.py", workdir / f"{KILLS_PLUGIN}.py")
    if grid:
        shutil.copy2(Path(__file__).resolve().parent / GRID_CELLS, workdir / GRID_TEST)


def run_mutmut(workdir: Path, kills: Path, names: list[str] | None = None, max_children: int = 2,
               against: str = "", env: dict[str, str] | None = None) -> None:
    """Run ``mutmut run`` in ``workdir`` (only ``names`` when given), its progress passed through; the kills it
    records name ``against``, the broker of the pass; ``env`` adds to its environment."""
    env = dict(os.environ, **(env or {}), AMQP_MUTATION_KILLS=str(kills), AMQP_MUTATION_AGAINST=against)
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *(names or [])]
    completed = subprocess.run(command, cwd=workdir, env=env, check=False)
    if completed.returncode not in (0, 1):
        raise SystemExit(f"mutation: mutmut run failed in {workdir} (exit {completed.returncode}); "
                         f"see its output above")


@cache
def not_checked() -> str:
    """mutmut's status of a mutant a stopped run never came to (its word for a mutant with no exit code), read
    from mutmut itself so that a rename there cannot leave this script's comparisons silently false."""
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[None]


def read_statuses(workdir: Path) -> dict[str, str]:
    """Every mutant's status from mutmut's ``.meta`` files, in mutmut's own words."""
    from mutmut.stats import status_by_exit_code

    statuses = {}
    for meta in (workdir / "mutants").rglob("*.meta"):
        for name, code in json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"].items():
            statuses[name] = status_by_exit_code[code]
    return statuses


def read_kills(kills: Path) -> dict[str, str]:
    """The first case that failed against each mutant, with the broker of the pass when that was not the
    reference (``test_core.py::test_case[…] against reference~variant-every-choice``)."""
    first: dict[str, str] = {}
    if kills.exists():
        for line in kills.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            against = record.get("against", "")
            case = record["case"] + (f" against {against}" if against and against != "reference" else "")
            first.setdefault(record["mutant"], case)
    return first


def merge_pass(statuses: dict[str, str], workdirs: dict[str, Path], found: dict[str, str], run_dir: Path,
               modules: list[str], names: list[str] | None) -> None:
    """Take one pass's statuses into ``statuses`` (and the work directory that holds each mutant's diff into
    ``workdirs``): the first pass (``names`` None) gives every mutant of ``modules``; a later one, run over the
    survivors ``names``, replaces a status only with a kill, or where no case had reached the mutant before."""
    for name, status in found.items():
        if module_of(name) not in modules or status == not_checked():
            continue
        if names is None:
            statuses[name], workdirs[name] = status, run_dir
        elif name in names and (status in KILLED_STATUSES or statuses[name] == "no tests"):
            statuses[name], workdirs[name] = status, run_dir


def diff_of(workdir: Path, name: str, path: str | None = None) -> str:
    """The mutant's diff as ``mutmut show`` prints it (its mutated function against the original); ``path`` is
    its source file in ``workdir`` (default: its module of the reference broker)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    previous = Path.cwd()
    os.chdir(workdir)
    try:
        return get_diff_for_mutant(name, path=path or f"amqp_conformance/peers/reference/{module_of(name)}.py")
    finally:
        os.chdir(previous)


def main(argv: list[str] | None = None) -> int:
    """Run the mutation test and print its figures; exit 1 when a survivor is untriaged or below 90 %."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=PROTOCOL_MODULES,
                        help="mutate only this module of peers/reference (repeatable; default: all protocol code"
                             + (f" but {', '.join(UNTRIAGED_MODULES)}, whose survivors are not triaged yet)"
                                if UNTRIAGED_MODULES else ")"))
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="mutants run at once")
    parser.add_argument("--out", type=Path, default=REPO / "mutation-results", help="where the results go")
    parser.add_argument("--workdir", type=Path, default=REPO / ".mutation", help="mutmut's work directory")
    parser.add_argument("--target", type=float, default=0.90, help="the score below which it exits 1")
    parser.add_argument("--report-only", action="store_true",
                        help="no run: report the last run kept in --workdir and --out (after a triage edit)")
    parser.add_argument("--previous", type=Path, default=None,
                        help="the survivors.md the triage was written against (default: OUT/survivors.previous.md, "
                             "the report this run replaced): entries are matched to renumbered mutants by diff")
    parser.add_argument("--carry-triage", action="store_true",
                        help="rename the triage entries whose mutants were renumbered (matched by diff) in "
                             "docs/mutation-triage before reporting, and record in each entry the diff of the "
                             "survivor it is about (so the next run carries it over with no earlier report)")
    args = parser.parse_args(argv)
    try:
        triage = load_triage()
    except TriageError as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return 2
    modules = args.module or list(DEFAULT_MODULES)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    kills = args.out / "kills.jsonl"
    first_dir = args.workdir / PASSES[0].label
    if args.report_only:
        if not (first_dir / "mutants").is_dir():
            print(f"mutation: no run kept in {args.workdir}; run without --report-only first", file=sys.stderr)
            return 2
    else:
        kills.unlink(missing_ok=True)
        if (args.out / "survivors.md").is_file():  # what the triage was written against: carry_over's input
            (args.out / "survivors.md").replace(args.out / "survivors.previous.md")
    statuses: dict[str, str] = {}
    workdirs: dict[str, Path] = {}
    for number, run in enumerate(PASSES):
        run_dir = args.workdir / run.label
        pass_modules = [m for m in modules if m in run.modules]
        names = None if number == 0 else [n for n, s in statuses.items()
                                          if module_of(n) in pass_modules and s not in KILLED_STATUSES]
        if names == [] or not pass_modules:
            continue
        if not args.report_only:
            what = (f"mutmut over {', '.join(pass_modules)}" if names is None
                    else f"{len(names)} survivors of {', '.join(pass_modules)}")
            judge = f"the client grid's {', '.join(run.grid)} rows" if run.grid else "the catalogue"
            print(f"\n== mutation: {what}; {judge} against {run.against}", flush=True)
            build_workdir(run_dir, pass_modules, run.broker, run.variant, run.tables, grid=bool(run.grid))
            run_mutmut(run_dir, kills, names=names, max_children=args.max_children,
                       against=f"{run.against} (client grid)" if run.grid else run.against, env=run.environment())
        if not (run_dir / "mutants").is_dir():
            continue  # --report-only over a run kept from before this pass existed
        merge_pass(statuses, workdirs, read_statuses(run_dir), run_dir, pass_modules, names)
    first_kill = read_kills(kills)
    results = [MutantResult(name, module_of(name), status, first_kill.get(name), triage.get(name))
               for name, status in sorted(statuses.items())]
    for result in results:
        if not result.killed:
            result.diff = diff_of(workdirs[result.name], result.name)
    previous = survivor_diffs(args.previous or args.out / "survivors.previous.md")
    carry = carry_over(triage, results, previous)
    if carry.moves and args.carry_triage:
        print(f"triage carried over to renumbered mutants: {apply_carry_over(carry.moves)} entries renamed")
        triage = load_triage()
        for result in results:
            result.triage = triage.get(result.name)
        carry = carry_over(triage, results, {carry.moves.get(n, n): d for n, d in previous.items()})
    elif carry.moves:
        print("triage entries whose mutants were renumbered (same diff, or the same changed lines listed below; "
              "--carry-triage renames them):")
        for old, new in sorted(carry.moves.items()):
            print(f"  {old.rsplit('.', 1)[-1]} -> {new.rsplit('.', 1)[-1]}")
    if carry.by_changed_lines:
        print("triage entries matched by the lines their mutant changes alone (the code around it changed; "
              + ("their diffs are written anew" if args.carry_triage else "--carry-triage carries them")
              + "; read each reason again): " + ", ".join(name.rsplit(".", 1)[-1] for name in carry.by_changed_lines))
    if carry.unmatched:
        print("triage entries written for a diff no survivor has now (triage them again): "
              + ", ".join(name.rsplit(".", 1)[-1] for name in carry.unmatched))
    if args.carry_triage:
        diffs, unchecked = diffs_to_record(results, carry.unmatched, stale_triage(triage, results))
        print(f"triage entries that now record their mutant's diff: {record_triage_diffs(diffs)} written")
        if unchecked:
            print(f"not recorded: {len(unchecked)} entries with no diff of their own in a module with stale entries "
                  "(renumbered: check each against survivors.md, then run again with --report-only --carry-triage)")
        triage = load_triage()
    elapsed = time.monotonic() - started
    return report(results, triage, elapsed, args.out, args.target)


def add_client_run_arguments(parser: argparse.ArgumentParser, client: str, tool: str,
                             survivors_help: str) -> argparse._MutuallyExclusiveGroup:
    """The options both client mutation scripts share: ``--out`` and ``--workdir`` (defaults under the repository,
    by client), ``--target``, and either ``--report-only`` or ``--survivors`` (``survivors_help`` says what the
    tool runs again); returns the group of those two, for a script's own alternative to them."""
    parser.add_argument("--out", type=Path, default=REPO / "mutation-results" / "clients" / client,
                        help="where the results go")
    parser.add_argument("--workdir", type=Path, default=REPO / ".mutation" / "clients" / client,
                        help=f"{tool}'s work directory")
    parser.add_argument("--target", type=float, default=0.90, help="the score below which it exits 1")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--report-only", action="store_true",
                       help="no run: report the last run kept in --workdir and --out (after a triage edit)")
    again.add_argument("--survivors", action="store_true",
                       help=f"run again only {survivors_help}, against the rows and harness as they are now (after a "
                            "change to them); its kills stand")
    parser.add_argument("--open-only", action="store_true",
                        help="with --survivors: only the survivors triaged open or not triaged at all (those a new "
                             "row or check was written for), a run of minutes instead of hours; rhea's script, with "
                             "no run kept, mutates the places of the entries triaged open")
    parser.add_argument("--prune-stale", action="store_true",
                        help="after the report, remove from the triage files the entries it lists as stale (their "
                             "mutants no longer survive)")
    return again


def check_open_only(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2, naming the fix) an ``--open-only`` without ``--survivors``, which it narrows."""
    if args.open_only and not args.survivors:
        parser.error("--open-only goes with --survivors: it narrows which of the last run's survivors run again")


def open_or_untriaged(triage: dict[str, dict[str, str]], name: str) -> bool:
    """Whether the mutant ``name`` is triaged ``open`` in ``triage`` (what a new row or check is written for), or is
    not triaged at all."""
    entry = triage.get(name)
    return entry is None or entry.get("category") == "open"


def prune_triage(directory: Path, names: list[str]) -> int:
    """Remove the ``[[mutant]]`` entries named ``names`` from every ``<module>.toml`` of ``directory``, keeping
    every other line as it was (comments, order); returns how many entries it removed."""
    wanted = set(names)
    removed = 0
    for path in sorted(directory.glob("*.toml")):
        head, *blocks = re.split(r"^\[\[mutant\]\]\n", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        kept = [b for b in blocks if tomllib.loads(b).get("name") not in wanted]
        if len(kept) != len(blocks):
            removed += len(blocks) - len(kept)
            path.write_text(head + "".join("[[mutant]]\n" + b for b in kept).rstrip("\n") + "\n", encoding="utf-8")
    return removed


def report(results: list[MutantResult], triage: dict[str, dict[str, str]], elapsed: float, out: Path,
           target: float, module_of_name: Callable[[str], str] = module_of) -> int:
    """Print the figures, write ``mutation.json`` and ``survivors.md``; 1 when untriaged or below target.
    ``module_of_name``: the module a triaged name is of (mutmut's naming by default), for the stale entries."""
    overall = score(results)
    by_module: dict[str, list[MutantResult]] = defaultdict(list)
    for result in results:
        by_module[result.module].append(result)
    print(f"\n== mutation score: {overall.killed} killed of {overall.total} mutants, {overall.equivalent} "
          f"equivalent, {overall.silent} source-silent, {len(overall.survivors) - overall.silent} other survivors: "
          f"{overall.score:.1%} (target {target:.0%}; strict, source-silent counted: {overall.strict:.1%}); "
          f"{elapsed:.0f} s")
    print(f"{'module':<14}{'mutants':>8}{'killed':>8}{'equiv.':>8}{'silent':>8}{'surv.':>8}{'score':>8}{'strict':>8}")
    for module, members in sorted(by_module.items()):
        counts = score(members)
        print(f"{module:<14}{counts.total:>8}{counts.killed:>8}{counts.equivalent:>8}{counts.silent:>8}"
              f"{len(counts.survivors) - counts.silent:>8}{counts.score:>8.1%}{counts.strict:>8.1%}")
    tables = Counter(table_of(r.killed_by) for r in results if r.killed and r.killed_by)
    unattributed = sum(1 for r in results if r.killed and not r.killed_by)
    print("\nkilled first by table: " + ", ".join(f"{t} {n}" for t, n in tables.most_common())
          + (f", a time-out or crash {unattributed}" if unattributed else ""))
    later = Counter(pass_of(r.killed_by) for r in results if r.killed and r.killed_by and pass_of(r.killed_by))
    if later:
        print("killed only in a later pass, against: " + ", ".join(f"{b} {n}" for b, n in later.most_common()))
    untriaged = [r for r in results if not r.killed and not r.triage]
    by_category = Counter(r.triage["category"] for r in results if not r.killed and r.triage)
    print(f"survivors: {len(untriaged)} untriaged, "
          + ", ".join(f"{n} {c}" for c, n in sorted(by_category.items())))
    stale = stale_triage(triage, results, module_of_name)
    if stale:
        print(f"stale triage entries (no longer surviving): {', '.join(stale)}")
    (out / "mutation.json").write_text(json.dumps({
        "elapsed_s": round(elapsed, 1), "total": overall.total, "killed": overall.killed,
        "equivalent": overall.equivalent, "source_silent": overall.silent, "score": round(overall.score, 4),
        "strict_score": round(overall.strict, 4), "stale_triage": stale,
        "mutants": [{"name": r.name, "module": r.module, "status": r.status, "killed_by": r.killed_by,
                     "triage": r.triage and r.triage["category"]} for r in results],
    }, indent=1) + "\n", encoding="utf-8")
    survivors = [r for r in results if not r.killed]
    text = ["# Surviving mutants", ""]
    for r in survivors:
        verdict = f"{r.triage['category']}: {r.triage['reason']}" if r.triage else "UNTRIAGED"
        text += [f"## {r.name} ({r.status})", "", verdict, "", "```diff", r.diff, "```", ""]
    (out / "survivors.md").write_text("\n".join(text), encoding="utf-8")
    print(f"results: {out / 'mutation.json'}; survivors with their diffs: {out / 'survivors.md'}")
    return 0 if overall.score >= target and not untriaged else 1


if __name__ == "__main__":
    sys.exit(main())

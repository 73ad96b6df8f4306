"""A shim's ``shim.toml`` (``peers/shims/README.md``), loaded strictly, and the shims found under a folder."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .crash import CrashRule, crash_rule
from .errors import ShimError

SHIMS_ROOT = Path(__file__).resolve().parent.parent / "shims"  # peers/shims/ of the source checkout
SPEC_FILE = "shim.toml"
PLACEHOLDERS = ("{home}", "{python}")  # the built copy's path; the harness's own interpreter (sys.executable)
CLIENT_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")
VERSION_TEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # a cache folder's name is <client>-<version>
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _string(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(_string(v) for v in value)


def _command(value: Any) -> bool:
    return _strings(value) and bool(value)


def _commands(value: Any) -> bool:
    return isinstance(value, list) and all(_command(v) for v in value)


# key -> (required, check, what is expected: quoted in the error)
KEYS: dict[str, tuple[bool, Callable[[Any], bool], str]] = {
    "client": (True, _string, "a string: the client's name, the same as its folder's"),
    "title": (True, _string, 'a string for people, such as "rhea (JavaScript)"'),
    "language": (True, _string, "a string: the shim's language"),
    "library": (True, _string, "a string: the library as its registry names it"),
    "version": (True, _string, "a string: the library's pinned version"),
    "requires": (True, _strings, "a list of strings: the commands that must be on PATH (may be empty)"),
    "build": (True, _commands, 'a list of commands, each a non-empty list of strings (may be empty: [])'),
    "run": (True, _command, 'a non-empty list of strings: the command that runs the shim'),
    "apt": (False, _strings, "a list of strings: the Debian packages that give what `requires` names"),
    "crash": (False, lambda value: crash_rule(value) is not None,
              'a table: stack = "python", "go" or "native", library = [fragments of the library\'s frames], and '
              '(python) loop_entries = [the shim\'s lines that hand control to the library\'s loop] or (native, '
              'required) [the symbols of the shim\'s function that runs the library\'s loop] (peers/shimrun/crash.py)'),
}


@dataclass(frozen=True)
class ShimSpec:
    """One shim as its ``shim.toml`` declares it, and the folder holding its sources."""

    client: str
    title: str
    language: str
    library: str
    version: str
    requires: tuple[str, ...]
    build: tuple[tuple[str, ...], ...]
    run: tuple[str, ...]
    folder: Path
    apt: tuple[str, ...] = ()
    crash: CrashRule | None = None  # how to tell the library's own crash in the shim's stderr (crash.py)

    @property
    def spec_file(self) -> Path:
        """The ``shim.toml`` this was loaded from."""
        return self.folder / SPEC_FILE

    def command(self, home: Path) -> list[str]:
        """The ``run`` command with ``{home}`` and ``{python}`` replaced: what to start, in ``home``."""
        return substitute(self.run, home)

    def build_commands(self, home: Path) -> list[list[str]]:
        """The ``build`` commands with ``{home}`` and ``{python}`` replaced, in order, to run in ``home``."""
        return [substitute(step, home) for step in self.build]


def substitute(args: tuple[str, ...] | list[str], home: Path) -> list[str]:
    """``args`` with every ``{home}`` replaced by ``home`` and every ``{python}`` by ``sys.executable``."""
    return [arg.replace("{home}", str(home)).replace("{python}", sys.executable) for arg in args]


def load_spec(folder: Path) -> ShimSpec:
    """The shim in ``folder``, from its ``shim.toml``; :class:`ShimError` naming the file and the field for an
    unreadable file, an unknown or missing key, a value of the wrong type, a ``client`` that is not the folder's
    name, a ``version`` unfit for a folder name, or an unknown ``{placeholder}``."""
    path = folder / SPEC_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ShimError(f"{path}: cannot read it ({exc.strerror}); every shim folder needs a {SPEC_FILE}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ShimError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    for key in data:
        if key not in KEYS:
            raise ShimError(f"{path}: unknown key `{key}`; the keys are {', '.join(KEYS)} (peers/shims/README.md)")
    for key, (required, check, expected) in KEYS.items():
        if key not in data:
            if required:
                raise ShimError(f"{path}: missing key `{key}`; add it: {expected}")
        elif not check(data[key]):
            raise ShimError(f"{path}: `{key}` must be {expected}, got {data[key]!r}")
    if data["client"] != folder.name or not CLIENT_NAME.fullmatch(data["client"]):
        raise ShimError(f"{path}: `client` is {data['client']!r} but the folder is {folder.name!r}; name the folder "
                        f"after the client (lower case letters, digits, '-' and '.')")
    if not VERSION_TEXT.fullmatch(data["version"]):
        raise ShimError(f"{path}: `version` {data['version']!r} cannot name a folder; write the version alone "
                        f"(letters, digits, '.', '-', '+', '_')")
    for key in ("build", "run"):
        steps = data[key] if key == "build" else [data[key]]
        for arg in (arg for step in steps for arg in step):
            for found in PLACEHOLDER.findall(arg):
                if found not in PLACEHOLDERS:
                    raise ShimError(f"{path}: `{key}` has the unknown placeholder {found} in {arg!r}; the "
                                    f"placeholders are {', '.join(PLACEHOLDERS)}")
    return ShimSpec(client=data["client"], title=data["title"], language=data["language"],
                    library=data["library"], version=data["version"], requires=tuple(data["requires"]),
                    build=tuple(tuple(step) for step in data["build"]), run=tuple(data["run"]),
                    folder=folder, apt=tuple(data.get("apt", ())), crash=crash_rule(data.get("crash")))


def discover(root: Path = SHIMS_ROOT) -> dict[str, ShimSpec]:
    """Every shim under ``root`` (each folder holding a ``shim.toml``), by client name, in name order.

    :class:`ShimError` when ``root`` is not a folder (an installed, not checked-out, suite has no shims) or any
    ``shim.toml`` is wrong: one bad shim is reported, never skipped.
    """
    if not root.is_dir():
        raise ShimError(f"no shims folder at {root}; run from a source checkout (pip install -e .)")
    return {folder.name: load_spec(folder) for folder in sorted(root.iterdir())
            if folder.is_dir() and (folder / SPEC_FILE).is_file()}

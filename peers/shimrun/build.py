"""A shim built once into the cache folder, never inside the source tree.

:func:`ensure_built` copies the shim's folder to ``<cache>/shims/<client>-<version>/`` (the cache folder of
:func:`~amqp_conformance.peers.toolchain.cache_root`, which honours ``$AMQP_CONFORMANCE_CACHE``) and runs its
``build`` commands there. A marker written last holds a digest of the shim's source files: the build is made
again only when a source changes. A second process waits on a lock file for the first
(:func:`~amqp_conformance.peers.toolchain.made_once`, as the suite's Maven builds do).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from amqp_conformance.peers.toolchain import JAVA_HINT, MVN_HINT, cache_root, made_once, say

from .errors import ShimError, ShimUnavailable
from .spec import ShimSpec

COMPLETE = ".amqp-conformance-built"  # written last into a built copy: the digest of the sources it was built from
BUILD_LOG = ".amqp-conformance-build.log"  # every build command's output, in the built copy
BUILD_TIMEOUT_S = 1800.0
PROGRESS_AFTER_S = 1.0  # a build that takes longer than this says so on stderr
ALWAYS_IGNORED = ("__pycache__", "*.pyc", ".DS_Store")
TOOL_HINTS = {
    "node": "install Node.js 18+",
    "npm": "install Node.js 18+",
    "go": "install Go from https://go.dev/dl/",
    "java": JAVA_HINT,
    "mvn": MVN_HINT,
}


def home_of(spec: ShimSpec, root: Path | None = None) -> Path:
    """Where ``spec`` is (or will be) built: ``<cache>/shims/<client>-<version>``."""
    return (root or cache_root()) / "shims" / f"{spec.client}-{spec.version}"


def _ignore_patterns(folder: Path) -> list[str]:
    """The folder's own ``.gitignore`` patterns (negations aside) and :data:`ALWAYS_IGNORED`."""
    patterns = list(ALWAYS_IGNORED)
    try:
        lines = (folder / ".gitignore").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    patterns += [line.strip().rstrip("/") for line in lines if line.strip() and line.strip()[0] not in "#!"]
    return patterns


def _ignored(relative: PurePosixPath, patterns: list[str]) -> bool:
    """Whether ``relative`` (to the shim's folder) is a build output or clutter, not a source."""
    for pattern in patterns:
        if pattern.startswith("/") or "/" in pattern:
            if fnmatch.fnmatch(str(relative), pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatch(relative.name, pattern):
            return True
    return False


def source_files(folder: Path) -> list[Path]:
    """The shim's source files, sorted: everything in its folder but what its ``.gitignore`` names,
    ``__pycache__`` and ``*.pyc``."""
    patterns = _ignore_patterns(folder)
    found: list[Path] = []
    for directory, subdirs, files in os.walk(folder):
        base = PurePosixPath(Path(directory).relative_to(folder).as_posix())
        subdirs[:] = sorted(d for d in subdirs if not _ignored(base / d, patterns))
        found += [Path(directory) / f for f in files if not _ignored(base / f, patterns)]
    return sorted(found)


def source_digest(folder: Path) -> str:
    """A digest of the shim's source files (their paths and contents): what a build was made from."""
    sha = hashlib.sha256()
    for path in source_files(folder):
        sha.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def missing_tools(spec: ShimSpec) -> list[str]:
    """The commands of ``requires`` that are not on PATH."""
    return [tool for tool in spec.requires if shutil.which(tool) is None]


def require_tools(spec: ShimSpec) -> None:
    """Nothing when every command of ``requires`` is on PATH; else :class:`ShimUnavailable`, one line naming them and
    how to get them (``rhea: needs `npm` on PATH (install Node.js 18+)``)."""
    missing = missing_tools(spec)
    if not missing:
        return
    hints = list(dict.fromkeys(TOOL_HINTS[tool] for tool in missing if tool in TOOL_HINTS))
    if spec.apt and any(tool not in TOOL_HINTS for tool in missing):
        hints.append("apt-get install " + " ".join(spec.apt))
    hint = "; ".join(hints) or f"install {' and '.join(missing)}"
    raise ShimUnavailable(f"{spec.client}: needs {', '.join(f'`{t}`' for t in missing)} on PATH ({hint})")


def built(spec: ShimSpec, root: Path | None = None) -> Path | None:
    """The built copy's folder when it was built from the shim's current sources, else None."""
    home = home_of(spec, root)
    try:
        recorded = (home / COMPLETE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return home if recorded == source_digest(spec.folder) else None


def ensure_built(spec: ShimSpec, root: Path | None = None, progress: Callable[[str], None] = say) -> Path:
    """The folder of ``spec``'s built copy, copying and building it first unless it was built from these sources.

    ``root`` is the cache folder (default :func:`cache_root`). A build longer than :data:`PROGRESS_AFTER_S` says so
    through ``progress`` (stderr). :class:`ShimUnavailable` when a command of ``requires`` is not on PATH;
    :class:`ShimError` when a build command fails (its last output lines and the build folder are named).
    """
    home = home_of(spec, root)

    def build_it() -> None:
        require_tools(spec)
        digest = source_digest(spec.folder)
        if home.exists():  # an interrupted build, or one from other sources: start again from a clean copy
            shutil.rmtree(home)
        patterns = _ignore_patterns(spec.folder)
        shutil.copytree(spec.folder, home, ignore=lambda directory, names: [
            n for n in names
            if _ignored(PurePosixPath((Path(directory) / n).relative_to(spec.folder).as_posix()), patterns)])
        _run_build(spec, home, progress)
        (home / COMPLETE).write_text(digest + "\n", encoding="utf-8")

    found = made_once(home, lambda: built(spec, root), build_it)
    if found is None:
        raise ShimError(f"{spec.client}: the copy built in {home} does not match its sources (did they change "
                        f"during the build?); run again")
    return found


def _short(command: list[str]) -> str:
    """``go build``, ``npm ci``, ``mvn package``: the program and its first argument that is not an option."""
    words = [Path(command[0]).name] + [arg for arg in command[1:] if not arg.startswith("-")][:1]
    return " ".join(words)


def _run_build(spec: ShimSpec, home: Path, progress: Callable[[str], None]) -> None:
    """Run every build command in ``home``, their output into :data:`BUILD_LOG`; :class:`ShimError` on a failure."""
    commands = spec.build_commands(home)
    if not commands:
        return
    started = time.monotonic()
    names = ", ".join(_short(c) for c in commands)
    announced = threading.Event()

    def say_building() -> None:
        announced.set()
        progress(f"building shim {spec.client} ({names}) ...")

    announce = threading.Timer(PROGRESS_AFTER_S, say_building)
    announce.daemon = True
    announce.start()
    log_path = home / BUILD_LOG
    try:
        with log_path.open("ab") as log:
            for command in commands:
                log.write(f"$ {' '.join(command)}\n".encode())
                log.flush()
                try:
                    code = subprocess.run(command, cwd=home, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S).returncode
                except FileNotFoundError:
                    raise ShimError(f"{spec.client}: build command {command[0]!r} not found; add it to `requires` "
                                    f"in {spec.spec_file} or install it") from None
                except subprocess.TimeoutExpired:
                    raise ShimError(f"{spec.client}: `{' '.join(command)}` ran past {BUILD_TIMEOUT_S:.0f} s in "
                                    f"{home}; run it there by hand to see why") from None
                if code != 0:
                    raise ShimError(f"{spec.client}: `{' '.join(command)}` failed (exit {code}) in {home}: "
                                    f"{_tail(log_path)}; fix the shim's sources, or run it there by hand "
                                    f"(all its output: {log_path})")
    finally:
        announce.cancel()
    if announced.is_set():
        progress(f"shim {spec.client} built in {home} ({time.monotonic() - started:.0f} s)")


def _tail(log_path: Path, lines: int = 5) -> str:
    """The last ``lines`` non-empty lines of the build's output, joined on one line with `` | ``."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    found = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("$ ")]
    return " | ".join(found[-lines:]) or "(no output)"

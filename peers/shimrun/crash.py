"""Whether a shim that exited was taken down by its client library on its own: sans-I/O, from its stderr.

A shim does only what the harness tells it (``peers/shims/README.md``), so when the library crashes inside its own
event loop, in code no shim line called, the client failed, not the harness: the cell is a FAIL naming the
library's frame, never an ERROR. Anything less certain stays the harness's ERROR: a stack with a shim frame
between the library's loop and the crash (a shim callback, or a shim call into the library's API, which may be the
shim's misuse), a stack of a format the shim does not declare, or no stack at all (a signal).

Each shim that can tell declares, in its ``shim.toml``, a ``crash`` table (the rule):

- ``stack``: the format its runtime prints an uncaught failure in: ``"python"`` (a traceback, innermost frame
  last), ``"go"`` (a panic, the panicking goroutine's frames innermost first) or ``"native"`` (a C or C++ shim's
  signal handler: a line ending ``SIGABRT: native stack of the crashing thread (innermost first):``, then
  glibc's ``backtrace_symbols_fd`` lines, ``object(symbol+0xoffset)[0xaddress]``, innermost first; or, for a C++
  exception that ended the library's loop, the line ``exception: thrown by the library's own loop, no shim frame
  on the way: TYPE: WHAT``, which the shim writes only when no exception ever left its own code the loop ran:
  its callbacks and scheduled work each mark their frame, so one the shim threw, or a library call of the shim's
  threw through, is never told as the library's);
- ``library``: fragments of a frame's file (Python), function (Go) or object path (native) that mark the
  library's own code;
- ``loop_entries``: (Python) the shim's own source lines that only hand control to the library's loop, such as
  ``container.run()``; a shim frame on any other line makes the crash the shim's (or uncertain). (native) the
  shim's function that only runs the library's loop (fragments of the frame's symbol, as the object names it:
  mangled): the first frame outside the library and the C runtime (libc, ld.so) must be one of them.

A Go shim is package ``main``: a panicking goroutine with a ``main.`` frame is the shim's. A native stack whose
innermost frames past the C runtime's are not the library's, or that ends before a loop entry (cut short), is
uncertain too; its error is assert(3)'s line just before the marker, else the signal's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STACKS = ("python", "go", "native")
_PY_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')
_GO_GOROUTINE = re.compile(r"^goroutine \d+ \[[^\]]*\]:$")
_GO_ARGUMENTS = re.compile(r"\([^()]*\)$")  # a Go frame's argument words: pkg.(*T).m(0xc000010000, 0x1)
_GO_LOCATION = re.compile(r"^\t(?P<file>\S+?):(?P<line>\d+)(?: \+0x[0-9a-f]+)?$")
# a C++ exception that ended the library's loop, none having left the shim's own code (shim.cpp's ShimFrame)
NATIVE_THROWN = re.compile(r"exception: thrown by the library's own loop, no shim frame on the way: (?P<error>.+)$")
NATIVE_MARKER = re.compile(r"(?P<signal>\bSIG[A-Z]+): native stack of the crashing thread \(innermost first\):$")
_NATIVE_FRAME = re.compile(  # backtrace_symbols: ./shim(_Z1fv+0x1d)[0x55d0c0a01b2d], /lib/libc.so.6(+0x3c050) [0x7f..]
    r"^(?P<object>[^()\[\]]*)(?:\((?P<symbol>[^()+]*)(?:\+(?P<offset>0x[0-9a-f]+))?\))? ?\[0x[0-9a-f]+\]$")
_NATIVE_ASSERTION = re.compile(r": Assertion `.*' failed\.$")  # glibc's assert(3): prog: file:line: function: ...
_NATIVE_RUNTIME = ("libc.so.", "libpthread.so.", "ld-linux", "ld.so.", "linux-vdso.so.")  # objects' file names


@dataclass(frozen=True)
class CrashRule:
    """A shim's ``crash`` table: how to tell its library's own crash in its stderr."""

    stack: str
    library: tuple[str, ...]
    loop_entries: tuple[str, ...] = ()


@dataclass(frozen=True)
class LibraryCrash:
    """The library's own crash: what it raised (``error``, one line) and where (``frame``: file:line in
    function, the innermost)."""

    error: str
    frame: str

    def describe(self) -> str:
        """One line: the error and the frame it was raised in."""
        return f"{self.error} (in {self.frame})"


def crash_rule(value: Any) -> CrashRule | None:
    """The rule ``value`` (a ``crash`` table of a ``shim.toml``) declares; None when it is not a valid one."""
    if not isinstance(value, dict) or set(value) - {"stack", "library", "loop_entries"}:
        return None
    library, entries = value.get("library"), value.get("loop_entries", [])
    if value.get("stack") not in STACKS or not _texts(library) or not library or not _texts(entries):
        return None
    if value["stack"] == "native" and not entries:
        return None  # no native stack would ever be the library's
    return CrashRule(value["stack"], tuple(library), tuple(entries))


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def library_crash(stderr: str, rule: CrashRule) -> LibraryCrash | None:
    """The library's own crash that ``stderr`` (a shim's whole standard error) ends with, by ``rule``; None when
    there is none, or the stack leaves any doubt that the library crashed in its own loop (see the module)."""
    return {"python": _python, "go": _go, "native": _native}[rule.stack](stderr, rule)


def _python(stderr: str, rule: CrashRule) -> LibraryCrash | None:
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    frames: list[tuple[str, str, str, str]] = []  # file, line, function, source
    error = ""
    for index in range(starts[-1] + 1, len(lines)):
        line = lines[index]
        match = _PY_FRAME.match(line)
        if match:
            source = lines[index + 1].strip() if index + 1 < len(lines) and lines[index + 1].startswith("    ") else ""
            frames.append((match["file"], match["line"], match["function"], source))
        elif line and not line.startswith(" "):
            error = line.strip()  # the exception's line: the first unindented line after the frames
            break
    if not frames or not error:
        return None
    innermost = frames[-1]
    if not _in_library(innermost[0], rule):
        return None
    for file, _line, _function, source in frames:
        if not _in_library(file, rule) and not _runtime_file(file) and source not in rule.loop_entries:
            return None  # a shim frame that is not a plain hand-over to the library's loop
    return LibraryCrash(error, f"{innermost[0]}:{innermost[1]} in {innermost[2]}")


def _runtime_file(file: str) -> bool:
    """A frame of Python's own library (threading, selectors; ``<frozen runpy>``): neither the shim's nor the
    client library's."""
    return file.startswith("<frozen ") or "/lib/python3" in file and "-packages/" not in file


def _go(stderr: str, rule: CrashRule) -> LibraryCrash | None:
    lines = stderr.splitlines()
    panics = [i for i, line in enumerate(lines) if line.startswith(("panic: ", "fatal error: "))]
    if not panics:
        return None
    error = lines[panics[-1]].strip()
    start = next((i for i in range(panics[-1] + 1, len(lines)) if _GO_GOROUTINE.match(lines[i])), None)
    if start is None:
        return None
    frames: list[tuple[str, str]] = []  # function, file:line
    index = start + 1
    while index + 1 < len(lines) and lines[index] and not lines[index].startswith("goroutine "):
        function, location = lines[index], _GO_LOCATION.match(lines[index + 1])
        if location is None:
            break
        frames.append((function.removeprefix("created by ").split(" in goroutine ")[0],
                       f"{location['file']}:{location['line']}"))
        index += 2
    code_frames = [f for f in frames if not f[0].startswith(("runtime.", "panic("))]  # the runtime's left out
    if not code_frames or any(f[0].startswith("main.") for f in frames):
        return None
    innermost = code_frames[0]
    if not _in_library(innermost[0], rule):
        return None
    return LibraryCrash(error, f"{innermost[1]} in {_GO_ARGUMENTS.sub('', innermost[0])}")


def _native(stderr: str, rule: CrashRule) -> LibraryCrash | None:
    lines = stderr.splitlines()
    thrown = next((found for line in reversed(lines) if (found := NATIVE_THROWN.search(line))), None)
    if thrown is not None:  # no stack to read: the shim vouches that no frame of its own was on the way
        return LibraryCrash(thrown["error"], "the library's loop, run by " + ", ".join(rule.loop_entries) +
                            " (a C++ exception: no stack)")
    markers = [(i, marker) for i, line in enumerate(lines) if (marker := NATIVE_MARKER.search(line))]
    if not markers:
        return None
    start, marker = markers[-1]
    before = lines[start - 1].strip() if start else ""  # assert(3)'s line, written just before it aborts
    error = before if _NATIVE_ASSERTION.search(before) else marker["signal"]
    innermost: re.Match[str] | None = None  # the library's innermost frame
    for line in lines[start + 1:]:
        frame = _NATIVE_FRAME.match(line.strip())
        if frame is None:
            break  # the stack's end, before any frame outside the library and the C runtime
        if frame["object"].rsplit("/", 1)[-1].startswith(_NATIVE_RUNTIME):
            continue  # the C runtime's: the signal's trampoline, raise, abort, assert
        if _in_library(frame["object"], rule):
            innermost = innermost or frame
            continue
        if innermost is None or not any(entry in (frame["symbol"] or "") for entry in rule.loop_entries):
            return None  # not the library's crash, or a shim frame other than its loop's thread is between
        return LibraryCrash(error, _native_frame(innermost))
    return None


def _native_frame(frame: re.Match[str]) -> str:
    """``object(symbol+0xoffset)`` as backtrace_symbols wrote it, without the run's address."""
    return f"{frame['object']}({frame['symbol'] or ''}{'+' + frame['offset'] if frame['offset'] else ''})"


def _in_library(text: str, rule: CrashRule) -> bool:
    return any(fragment in text for fragment in rule.library)

"""A running shim: commands written to its standard input, replies and events read from its standard output.

One thread reads the shim's standard output line by line (it blocks on the pipe: no polling) and sorts each
line: an event is appended to :attr:`ShimProcess.events` at once, with the monotonic time it was read; a reply,
or a line that breaks the contract, goes to a queue that :meth:`ShimProcess.request` waits on. The shim's
standard error goes to a file, kept as the case's evidence.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .build import require_tools
from .crash import NATIVE_MARKER, LibraryCrash, library_crash
from .errors import ShimError, ShimExited, ShimTimeout
from .spec import ShimSpec

CLOSE_WAIT_S = 5.0  # after standard input closes, how long the shim may take to exit before it is killed
EXIT_WAIT_S = 2.0  # after its standard output ended, how long to wait for the exit status
QUOTE_CHARS = 200


@dataclass(frozen=True)
class ShimEvent:
    """One event line of a shim: when it was read (``time.monotonic()``) and the object it carried."""

    at: float
    body: dict[str, Any]


@dataclass(frozen=True)
class ShimReply:
    """One command a shim answered, as a script asked it: the asking party (the client's role in a cell), the
    command, when it was asked for and when its reply was read (both ``time.monotonic()``, the clock of
    :class:`ShimEvent`), and the reply object."""

    role: str
    op: str
    at: float
    answered: float
    body: dict[str, Any]


class ShimProcess:
    """The shim of ``spec`` running from its built copy ``home`` (see :func:`~.build.ensure_built`).

    ``stderr_path`` receives its standard error (default: a new file in the temporary folder, kept). Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(self, spec: ShimSpec, home: Path, stderr_path: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        require_tools(spec)
        self.spec = spec
        self.command = spec.command(home)
        if stderr_path is None:
            fd, name = tempfile.mkstemp(prefix=f"shim-{spec.client}-", suffix=".stderr.log")
            os.close(fd)
            stderr_path = Path(name)
        self.stderr_path = stderr_path
        self.events: list[ShimEvent] = []
        self.late_replies: list[dict[str, Any]] = []  # replies to commands that had timed out already
        self._lines: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._next_id = 1
        self._abandoned: set[int] = set()
        self._ended = False  # standard output ended
        self._closed = False
        self._stderr = stderr_path.open("wb")
        try:
            self._process = subprocess.Popen(self.command, cwd=home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=self._stderr, env=env)
        except OSError as exc:
            self._stderr.close()
            raise ShimError(f"{spec.client}: cannot start {' '.join(self.command)!r} in {home} ({exc.strerror}); "
                            f"build the shim first (ensure_built) and check `run` in {spec.spec_file}") from None
        assert self._process.stdout is not None and self._process.stdin is not None
        self._stdin: IO[bytes] = self._process.stdin
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,),
                                        name=f"shim-{spec.client}-stdout", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The shim's process id."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The shim's exit status once it has exited (negative: killed by that signal), else None."""
        return self._process.poll()

    def _read(self, stdout: IO[bytes]) -> None:
        """The reader thread: sort each line of standard output until it ends."""
        for raw in iter(stdout.readline, b""):
            at = time.monotonic()
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._lines.put(("garbage", text))
            elif "event" in body:
                self.events.append(ShimEvent(at, body))
            else:
                self._lines.put(("reply", body))
        self._lines.put(("end", None))

    def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send command ``op`` with ``fields`` (sent as given: ``timeout_ms`` is the caller's) and a fresh ``id``;
        return its reply (``ok`` true or false) once it arrives, within ``timeout`` seconds.

        Events written meanwhile land in :attr:`events`. :class:`ShimTimeout` when no reply comes in time;
        :class:`ShimError` when the shim writes a line that is not a JSON object, a reply to a command never
        sent or without ``ok``; :class:`ShimExited` when it exits (its status and the end of its stderr are quoted;
        its ``crash`` is the library's own crash, when the stderr shows one by the shim's rule).
        """
        if self._closed:
            raise ShimError(f"{self.spec.client}: the shim was closed; start a new ShimProcess")
        command_id = self._next_id
        self._next_id += 1
        line = json.dumps({"id": command_id, "op": op, **fields}, ensure_ascii=False) + "\n"
        if not self._ended:
            try:
                self._stdin.write(line.encode("utf-8"))
                self._stdin.flush()
            except OSError:
                pass  # it exited: its standard output ends too, and the wait below says how
        deadline = time.monotonic() + timeout
        while True:
            if self._ended:
                message = self._exit_message(op, command_id)  # waits for the exit: its stderr is complete
                raise ShimExited(message, self.library_crash())
            try:
                kind, body = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._abandoned.add(command_id)
                raise ShimTimeout(f"{self.spec.client}: no reply to {op} (id {command_id}) within {timeout:g} s; "
                                  f"raise the timeout or see the shim's stderr in {self.stderr_path}") from None
            if kind == "end":
                self._ended = True
            elif kind == "garbage":
                raise ShimError(f"{self.spec.client}: wrote a line that is not a JSON object: "
                                f"{body[:QUOTE_CHARS]!r}; a shim writes diagnostics to stderr, not stdout")
            elif body.get("id") == command_id:
                if not isinstance(body.get("ok"), bool):
                    raise ShimError(f"{self.spec.client}: the reply to {op} (id {command_id}) has no boolean ok: "
                                    f"{json.dumps(body)[:QUOTE_CHARS]}; fix the shim's reply")
                return body
            elif body.get("id") in self._abandoned:
                self.late_replies.append(body)
            else:
                raise ShimError(f"{self.spec.client}: a reply to no command waiting (id {body.get('id')!r}, "
                                f"waiting for {command_id}): {json.dumps(body)[:QUOTE_CHARS]}; fix the shim's ids")

    def _exit_message(self, op: str, command_id: int) -> str:
        """One line: the shim's exit status and the end of its stderr, while ``op`` waited."""
        try:
            code: int | str = self._process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            code = "none yet (its standard output closed)"
        return (f"{self.spec.client}: exited with status {code} before replying to {op} (id {command_id}); its "
                f"stderr ends: {self.stderr_tail()!r} (all of it: {self.stderr_path})")

    def library_crash(self) -> LibraryCrash | None:
        """The client library's own crash its stderr ends with, by the shim's declared ``crash`` rule
        (:mod:`.crash`); None when the shim declares none, has not exited, or its stderr shows no such crash."""
        if self.spec.crash is None or self.returncode is None:
            return None
        return library_crash(self._stderr_text(), self.spec.crash)

    def stderr_tail(self, lines: int = 5) -> str:
        """The last ``lines`` non-empty lines the shim wrote to stderr, joined with `` | ``; where it ends with a
        native crash's stack (:mod:`.crash`), the lines up to the stack's marker (what failed, not libc's frames)."""
        written = [line.strip() for line in self._stderr_text().splitlines() if line.strip()]
        marked = [i for i, line in enumerate(written) if NATIVE_MARKER.search(line)]
        return " | ".join(written[:marked[-1] + 1][-lines:] if marked else written[-lines:])

    def _stderr_text(self) -> str:
        """All the shim wrote to stderr so far ("" when the file cannot be read)."""
        self._stderr.flush()
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def close(self, timeout: float = CLOSE_WAIT_S) -> int:
        """Close the shim's standard input (the contract's signal to close its connection and exit); wait up to
        ``timeout`` seconds, then kill it. Returns its exit status (negative when killed). Calling again is harmless.
        """
        if not self._closed:
            self._closed = True
            try:
                self._stdin.close()
            except OSError:
                pass
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._reader.join(EXIT_WAIT_S)
            assert self._process.stdout is not None
            self._process.stdout.close()
            self._stderr.close()
        code = self._process.returncode
        assert code is not None
        return code

    def __enter__(self) -> ShimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

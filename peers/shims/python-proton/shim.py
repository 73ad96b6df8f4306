"""The python-proton client shim: drives python-qpid-proton's reactor for the harness (``../README.md``).

Run by the harness with its own interpreter (``{python} shim.py``): the proton it drives is the one the
project pins. The main thread runs a ``proton.reactor.Container`` with one ``MessagingHandler``
(``shim_handler.py``); a second thread reads JSON-lines commands from standard input and hands each to the
container's thread through an ``EventInjector`` as an ``ApplicationEvent`` (``shim_command``). Only the
container's thread writes standard output; diagnostics go to standard error. When standard input closes the
shim closes its connection and exits 0.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

from proton.reactor import ApplicationEvent, Container, EventInjector
from shim_handler import ShimHandler, log


class Output:
    """Standard output, one JSON object a line, flushed at once."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, obj: dict[str, Any]) -> None:
        """Write ``obj`` as one line."""
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def read_commands(stream: TextIO, injector: EventInjector) -> None:
    """Hand each line of ``stream`` to the container (``shim_command``, or ``shim_bad_line`` for one that is not
    JSON), then ``shim_eof`` at its end."""
    for line in stream:
        if not line.strip():
            continue
        try:
            command = json.loads(line)
        except ValueError:
            injector.trigger(ApplicationEvent("shim_bad_line", subject=line.strip()[:200]))
            continue
        injector.trigger(ApplicationEvent("shim_command", subject=command))
    injector.trigger(ApplicationEvent("shim_eof"))


def main() -> int:
    """Serve commands until standard input ends; 0 once the connection is closed (or its close timed out)."""
    sys.stdin.reconfigure(encoding="utf-8")
    sys.stdout.reconfigure(encoding="utf-8")
    injector = EventInjector()
    stopped = threading.Event()
    container: Container | None = None

    def stop() -> None:
        if not stopped.is_set():
            stopped.set()
            injector.close()
            assert container is not None
            container.stop()

    handler = ShimHandler(Output(sys.stdout), stop)
    container = Container(handler)
    handler.container = container
    container.selectable(injector)
    threading.Thread(target=read_commands, args=(sys.stdin, injector), name="stdin", daemon=True).start()
    container.run()
    log("standard input closed; exiting")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        import proton

        print(f"python-qpid-proton {'.'.join(map(str, proton.VERSION))} importable", file=sys.stderr)
        sys.exit(0)
    sys.exit(main())

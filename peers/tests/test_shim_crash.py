"""A shim taken down by its client library in the library's own loop is told apart from the harness's failure
(peers/shimrun/crash.py): only a stack with no shim code between the library's loop and the crash counts."""

from __future__ import annotations

import textwrap

import pytest
from amqp_conformance.peers.shimrun import ShimError, ShimExited, ShimProcess, load_spec
from amqp_conformance.peers.shimrun.crash import CrashRule, crash_rule, library_crash

PROTON = CrashRule("python", ("/proton/",), ("sys.exit(main())", "container.run()"))
GO_AMQP = CrashRule("go", ("github.com/Azure/go-amqp",))
SITE = "/work/.venv/lib/python3.11/site-packages"
SHIM = "/cache/shims/python-proton-0.40"

PROTON_OWN = f"""\
python-proton-shim: connected
Traceback (most recent call last):
  File "{SHIM}/shim.py", line 83, in <module>
    sys.exit(main())
             ^^^^^^
  File "{SHIM}/shim.py", line 71, in main
    container.run()
  File "{SITE}/proton/_reactor.py", line 190, in run
    while self.process():
          ^^^^^^^^^^^^^^
  File "{SITE}/proton/_reactor.py", line 255, in process
    self._dispatch(event)
  File "/usr/lib/python3.11/threading.py", line 1002, in _bootstrap
    self._bootstrap_inner()
  File "{SITE}/proton/_handlers.py", line 404, in on_link_remote_close
    self.on_link_closed(None)
  File "{SITE}/proton/_handlers.py", line 612, in on_link_closed
    _dispatch(self.delegate, 'on_link_closed', event.link)
                                               ^^^^^^^^^^
AttributeError: 'NoneType' object has no attribute 'link'
"""


def test_a_traceback_wholly_in_the_library_below_the_loop_is_its_own_crash():
    crash = library_crash(PROTON_OWN, PROTON)
    assert crash is not None
    assert crash.error == "AttributeError: 'NoneType' object has no attribute 'link'"
    assert crash.frame == f"{SITE}/proton/_handlers.py:612 in on_link_closed"
    assert crash.describe() == f"{crash.error} (in {crash.frame})"


def test_a_shim_callback_or_shim_code_on_the_stack_leaves_it_to_the_harness():
    through_handler = PROTON_OWN.replace(
        f'  File "{SITE}/proton/_handlers.py", line 404, in on_link_remote_close\n',
        f'  File "{SHIM}/shim_handler.py", line 301, in on_link_remote_close\n'
        f'    self.report_end("link", condition)\n'
        f'  File "{SITE}/proton/_handlers.py", line 404, in on_link_remote_close\n')
    assert library_crash(through_handler, PROTON) is None  # the shim called in: its misuse, or the library's?
    in_the_shim = PROTON_OWN.replace(f'"{SITE}/proton/_handlers.py", line 612', f'"{SHIM}/shim_ops.py", line 612')
    assert library_crash(in_the_shim, PROTON) is None  # the innermost frame is the shim's
    other_entry = PROTON_OWN.replace("    container.run()\n", "    container.run(); helper()\n")
    assert library_crash(other_entry, PROTON) is None  # a shim line not declared a hand-over to the loop
    assert library_crash("python-proton-shim: standard input closed; exiting\n", PROTON) is None
    assert library_crash(PROTON_OWN.replace("AttributeError:", "  AttributeError:"), PROTON) is None  # no error line


def test_the_last_of_chained_tracebacks_is_the_one_judged():
    handled = textwrap.dedent(f"""\
        Traceback (most recent call last):
          File "{SHIM}/shim_ops.py", line 12, in send
            raise KeyError('x')
        KeyError: 'x'

        During handling of the above exception, another exception occurred:

        """)
    assert library_crash(handled + PROTON_OWN, PROTON) is not None
    assert library_crash(PROTON_OWN + "\n" + handled, PROTON) is None


GO_PANIC = """\
go-amqp-shim: 01:02:03.000001 connected
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x6b2c1a]

goroutine 34 [running]:
github.com/Azure/go-amqp.(*link).muxHandleFrame(0xc000180000, {0x7a1e40, 0xc0001a2000})
\t/root/go/pkg/mod/github.com/!azure/go-amqp@v1.7.0/link.go:312 +0x1ba
github.com/Azure/go-amqp.(*Receiver).mux(0xc000180000, {0x0, 0x0})
\t/root/go/pkg/mod/github.com/!azure/go-amqp@v1.7.0/receiver.go:600 +0x2c5
created by github.com/Azure/go-amqp.(*Receiver).attach in goroutine 7
\t/root/go/pkg/mod/github.com/!azure/go-amqp@v1.7.0/receiver.go:480 +0x8ef

goroutine 1 [chan receive]:
main.(*shim).receive(0xc000012345, {0xc0000a6000, 0x40})
\t/cache/shims/go-amqp-1.7.0/main.go:420 +0x1d2
"""


def test_a_panic_in_a_goroutine_of_the_library_is_its_own_crash():
    crash = library_crash(GO_PANIC, GO_AMQP)
    assert crash is not None
    assert crash.error == "panic: runtime error: invalid memory address or nil pointer dereference"
    assert crash.frame == ("/root/go/pkg/mod/github.com/!azure/go-amqp@v1.7.0/link.go:312 in "
                           "github.com/Azure/go-amqp.(*link).muxHandleFrame")


def test_a_panic_with_a_shim_frame_in_its_goroutine_is_left_to_the_harness():
    in_main = GO_PANIC.replace("created by github.com/Azure/go-amqp.(*Receiver).attach in goroutine 7\n",
                               "main.(*shim).receive(0xc000012345, {0xc0000a6000, 0x40})\n\t/shim/main.go:9 +0x1\n"
                               "created by github.com/Azure/go-amqp.(*Receiver).attach in goroutine 7\n")
    assert library_crash(in_main, GO_AMQP) is None
    started_by_the_shim = GO_PANIC.replace("created by github.com/Azure/go-amqp.(*Receiver).attach",
                                           "created by main.(*shim).attach")
    assert library_crash(started_by_the_shim, GO_AMQP) is None
    assert library_crash(GO_PANIC.replace("github.com/Azure/go-amqp.(*link)", "example.com/other.(*link)"),
                         GO_AMQP) is None  # the innermost frame is not the library's
    assert library_crash("go-amqp-shim: reading stdin: EOF\n", GO_AMQP) is None


@pytest.mark.parametrize("table", [
    {"stack": "java", "library": ["org.apache.qpid"]},
    {"stack": "python", "library": []},
    {"stack": "python", "library": ["/proton/"], "loop_entries": "container.run()"},
    {"stack": "python", "library": ["/proton/"], "entries": []},
    "python",
])
def test_a_crash_table_that_is_not_a_rule_is_refused(table):
    assert crash_rule(table) is None


def fake_shim_folder(tmp_path, crash_table: str):
    """A folder with the fake shim's shim.toml (``python fake.py``), its ``crash`` table as given."""
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "shim.toml").write_text(textwrap.dedent('''\
        client = "fake"
        title = "a fake"
        language = "python"
        library = "fake"
        version = "1"
        requires = []
        build = []
        run = ["{python}", "fake.py"]
        [crash]
        ''') + textwrap.dedent(crash_table))
    return folder


def test_shim_toml_names_a_bad_crash_table(tmp_path):
    folder = fake_shim_folder(tmp_path, '''\
        stack = "java"
        library = ["org.apache"]
        ''')
    with pytest.raises(ShimError, match=r"shim.toml: `crash` must be a table: stack = \"python\" or \"go\""):
        load_spec(folder)


LIBRARY = """\
def loop(callback):
    callback(None)

def on_event(event):
    return event.link
"""

FAKE_SHIM = """\
import json, sys
sys.path.insert(0, {lib!r})
from lib import loop, on_event


def main():
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "crash":
            loop(on_event)
        print(json.dumps({{"id": command["id"], "ok": True}}), flush=True)
    return 0


sys.exit(main())
"""


def test_a_shim_whose_library_crashes_in_its_loop_exits_with_that_crash(tmp_path):
    library = tmp_path / "lib"
    library.mkdir()
    (library / "lib.py").write_text(LIBRARY)
    folder = fake_shim_folder(tmp_path, f'''\
        stack = "python"
        library = ["{library}/"]
        loop_entries = ["sys.exit(main())", "loop(on_event)"]
        ''')
    (folder / "fake.py").write_text(FAKE_SHIM.format(lib=str(library)))
    with ShimProcess(load_spec(folder), folder, stderr_path=tmp_path / "stderr.log") as shim:
        assert shim.request("echo", 10) == {"id": 1, "ok": True}
        assert shim.library_crash() is None  # running: nothing to judge
        with pytest.raises(ShimExited) as exited:
            shim.request("crash", 10)
    assert "exited with status 1 before replying to crash" in str(exited.value)
    assert exited.value.crash is not None
    assert exited.value.crash.error == "AttributeError: 'NoneType' object has no attribute 'link'"
    assert exited.value.crash.frame == f"{library}/lib.py:5 in on_event"

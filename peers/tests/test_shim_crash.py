"""A shim taken down by its client library in the library's own loop is told apart from the harness's failure
(peers/shimrun/crash.py): only a stack with no shim code between the library's loop and the crash counts."""

from __future__ import annotations

import textwrap

import pytest
from amqp_conformance.peers.shimrun import ShimError, ShimExited, ShimProcess, load_spec
from amqp_conformance.peers.shimrun.crash import CrashRule, LibraryCrash, crash_rule, library_crash

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


PROTON_CPP = CrashRule("native", ("/libqpid-proton.so.", "/libqpid-proton-cpp.so."),
                       ("_Z16container_threadRN6proton9containerE",))
CPP_SHIM = "/cache/shims/proton-cpp-0.37.0/shim"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PROTON_C = "/lib/x86_64-linux-gnu/libqpid-proton.so.11"
PROTON_CPP_LIB = "/lib/x86_64-linux-gnu/libqpid-proton-cpp.so.12"
CPP_ABORT = f"""\
shim: ./c/src/core/object/object.c:121: pn_class_free: Assertion `rc == 1 || rc == -1' failed.
proton-cpp shim: SIGABRT: native stack of the crashing thread (innermost first):
{LIBC}(+0x3c050)[0x7f01d125a050]
{LIBC}(+0x8aeec)[0x7f01d12a8eec]
{LIBC}(gsignal+0x12)[0x7f01d1259fb2]
{LIBC}(abort+0xd3)[0x7f01d1244472]
{LIBC}(+0x26395)[0x7f01d1244395]
{LIBC}(+0x34ec2)[0x7f01d1252ec2]
"""
# the shim (proton-cpp, peers/shims/proton-cpp/shim.cpp) as the grid's at-least-once-connection-closed row took it
# down: proton-c freeing the closed connection in pn_proactor_done, under container_thread only
PROTON_CPP_OWN = CPP_ABORT + f"""\
{PROTON_C}(+0x18973)[0x7f01d178a973]
{PROTON_C}(+0x33379)[0x7f01d17a5379]
{PROTON_C}(pn_class_decref+0x3d)[0x7f01d178a86d]
{PROTON_C}(pn_connection_driver_destroy+0x24)[0x7f01d179dfb4]
{PROTON_C}(+0x56937)[0x7f01d17c8937]
{PROTON_C}(pn_proactor_done+0x24c)[0x7f01d17c970c]
{PROTON_CPP_LIB}(_ZN6proton9container4impl6threadEv+0x10f)[0x7f01d182f45f]
{PROTON_CPP_LIB}(_ZN6proton9container4impl3runEi+0x328)[0x7f01d182f8b8]
{CPP_SHIM}(_Z16container_threadRN6proton9containerE+0xa)[0x55db89feca57]
{CPP_SHIM}(_ZNSt6thread11_State_implINS_8_InvokerISt5tupleIJPFvRN6proton9containerEESt17reference_wrapperIS4_EEEEEE6_M_runEv+0xe)[0x55db8a006c32]
/lib/x86_64-linux-gnu/libstdc++.so.6(+0xd44a3)[0x7f01d14d44a3]
{LIBC}(+0x891f5)[0x7f01d12a71f5]
{LIBC}(+0x1098ec)[0x7f01d13278ec]
"""


def test_a_native_stack_wholly_in_the_library_below_its_loop_thread_is_its_own_crash():
    crash = library_crash("proton-cpp shim: connected\n" + PROTON_CPP_OWN, PROTON_CPP)
    assert crash is not None
    assert crash.error == ("shim: ./c/src/core/object/object.c:121: pn_class_free: "
                           "Assertion `rc == 1 || rc == -1' failed.")
    assert crash.frame == f"{PROTON_C}(+0x18973)"  # the innermost, as backtrace_symbols named it
    faulted = PROTON_CPP_OWN.split("\n", 1)[1].replace("SIGABRT:", "SIGSEGV:")
    assert library_crash(faulted, PROTON_CPP) == LibraryCrash("SIGSEGV", crash.frame)  # no assert(3) line


# the shim calling the API wrongly (proton::connection().open()): a copy of the shim built with that call
CPP_ABORT_IN_OPEN = CPP_ABORT.replace("object/object.c:121: pn_class_free: Assertion `rc == 1 || rc == -1' failed.",
                                      "engine.c:108: pn_connection_open: Assertion `connection' failed.")
# ... in a command run on the container thread
PROTON_CPP_FROM_A_CALLBACK = CPP_ABORT_IN_OPEN + f"""\
{PROTON_C}(+0x30cfa)[0x7ff8414bdcfa]
{PROTON_CPP_LIB}(_ZN6proton10connection4openEv+0x2f)[0x7ff84153fa2f]
{CPP_SHIM}(+0x2a055)[0x55b994772055]
{CPP_SHIM}(+0x2a55c)[0x55b99477255c]
{CPP_SHIM}(+0x2cc28)[0x55b994774c28]
{CPP_SHIM}(+0x2ccbe)[0x55b994774cbe]
{PROTON_CPP_LIB}(_ZN6proton9container4impl14run_timer_jobsEv+0x611)[0x7ff841544951]
{PROTON_CPP_LIB}(_ZN6proton9container4impl8dispatchEP10pn_event_t+0x361)[0x7ff841549e41]
{PROTON_CPP_LIB}(_ZN6proton9container4impl6threadEv+0xd8)[0x7ff84154a428]
{PROTON_CPP_LIB}(_ZN6proton9container4impl3runEi+0x328)[0x7ff84154a8b8]
{CPP_SHIM}(_Z16container_threadRN6proton9containerE+0xa)[0x55b99475da67]
"""


def test_a_native_stack_with_a_shim_frame_between_the_loop_and_the_crash_is_left_to_the_harness():
    assert library_crash(PROTON_CPP_FROM_A_CALLBACK, PROTON_CPP) is None  # the shim's misuse, or the library's?
    in_the_shim = PROTON_CPP_OWN.replace(f"{PROTON_C}(+0x18973)", f"{CPP_SHIM}(+0x2a055)")
    assert library_crash(in_the_shim, PROTON_CPP) is None  # the innermost frame past libc is the shim's
    cut_short = PROTON_CPP_OWN.split(f"{CPP_SHIM}(_Z16")[0]
    assert library_crash(cut_short, PROTON_CPP) is None  # no loop entry below the library's frames


def test_a_native_crash_on_another_shim_thread_is_left_to_the_harness():
    on_main = CPP_ABORT_IN_OPEN + f"""\
{PROTON_C}(+0x30cfa)[0x7f29ba9d0cfa]
{PROTON_CPP_LIB}(_ZN6proton10connection4openEv+0x2f)[0x7f29baa52a2f]
{CPP_SHIM}(main+0x647)[0x55c8ce7d137c]
{LIBC}(+0x2724a)[0x7f29ba44524a]
{LIBC}(__libc_start_main+0x85)[0x7f29ba445305]
{CPP_SHIM}(_start+0x21)[0x55c8ce7b8af1]
"""
    assert library_crash(on_main, PROTON_CPP) is None  # the main thread (stdin) called into proton


def test_a_native_abort_without_the_stack_is_left_to_the_harness():
    assertion_only = PROTON_CPP_OWN.splitlines()[0] + "\n"  # a shim without the handler: what stderr said before
    assert library_crash(assertion_only, PROTON_CPP) is None
    assert library_crash(CPP_ABORT, PROTON_CPP) is None  # the marker and the C runtime's frames, nothing else
    assert library_crash(PROTON_CPP_OWN.replace("native stack of", "stack of"), PROTON_CPP) is None


# what shim.cpp writes when an exception ended container::run() and none had left its own code (ShimFrame), then
# the line it writes for every exception that ends the loop
CPP_THROWN = ("proton-cpp shim: exception: thrown by the library's own loop, no shim frame on the way: "
              "N6proton5errorE: receiver read failure\n"
              "proton-cpp shim: container.run() ended: N6proton5errorE: receiver read failure\n")


def test_a_cpp_exception_the_library_threw_in_its_own_loop_is_its_own_crash():
    """The shim vouches that no exception left its code (its ShimFrame marks): proton's own loop threw, as 0.37's
    adapter does decoding an aborted delivery (interop.outcomes/credit-issued-again-after-an-abort)."""
    crash = library_crash(CPP_THROWN, PROTON_CPP)
    assert crash is not None and crash.error == "N6proton5errorE: receiver read failure"
    assert crash.frame == ("the library's loop, run by _Z16container_threadRN6proton9containerE "
                           "(a C++ exception: no stack)")


def test_a_cpp_exception_without_the_shims_word_for_it_is_left_to_the_harness():
    """An exception that left a shim callback (or a library call a callback made) ends the loop with the plain line
    only: the shim's exit, the harness's ERROR."""
    assert library_crash(CPP_THROWN.splitlines()[1] + "\n", PROTON_CPP) is None


@pytest.mark.parametrize("table", [
    {"stack": "java", "library": ["org.apache.qpid"]},
    {"stack": "python", "library": []},
    {"stack": "python", "library": ["/proton/"], "loop_entries": "container.run()"},
    {"stack": "python", "library": ["/proton/"], "entries": []},
    {"stack": "native", "library": ["/libqpid-proton.so."]},  # no loop entry: no stack would ever count
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
    with pytest.raises(ShimError, match=r'shim.toml: `crash` must be a table: stack = "python", "go" or "native"'):
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


def test_a_native_stack_the_harness_cannot_vouch_for_is_quoted_up_to_its_marker(tmp_path):
    """An uncertain native crash stays an ERROR; what it quotes of stderr is what failed (the assertion and the
    marker), not the C runtime's frames at the stack's bottom."""
    folder = fake_shim_folder(tmp_path, f'''\
        stack = "native"
        library = ["{PROTON_C}", "{PROTON_CPP_LIB}"]
        loop_entries = ["_Z16container_threadRN6proton9containerE"]
        ''')
    (folder / "fake.py").write_text(textwrap.dedent(f'''\
        import json, os, sys
        for line in sys.stdin:
            command = json.loads(line)
            sys.stderr.write({PROTON_CPP_FROM_A_CALLBACK!r} + "/lib/x86_64-linux-gnu/libc.so.6(+0x1098ec)[0x7f0]\\n")
            sys.stderr.flush()
            os._exit(134)
        '''))
    with ShimProcess(load_spec(folder), folder, stderr_path=tmp_path / "stderr.log") as shim:
        with pytest.raises(ShimExited) as exited:
            shim.request("close", 10)
    assert exited.value.crash is None  # a shim frame between the loop and the crash: the harness's ERROR
    tail = str(exited.value).split("stderr ends: ", 1)[1].rsplit(" (all of it: ", 1)[0]
    assert tail == repr("shim: ./c/src/core/engine.c:108: pn_connection_open: Assertion `connection' failed. | "
                        "proton-cpp shim: SIGABRT: native stack of the crashing thread (innermost first):")

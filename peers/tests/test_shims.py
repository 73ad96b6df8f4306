"""The harness side of the client shims (peers/shimrun/): shim.toml loading, version pins, cached builds, the
JSON-lines conversation; and the python-proton shim end to end against the embedded reference broker."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from amqp_conformance.peers.reference.broker import Broker
from amqp_conformance.peers.reference.server import ReferenceServer
from amqp_conformance.peers.shimrun import (
    ShimError,
    ShimProcess,
    ShimTimeout,
    ShimUnavailable,
    check_pin,
    discover,
    ensure_built,
    home_of,
    load_spec,
    pinned_versions,
)
from amqp_conformance.peers.shimrun import build as shim_build

GOOD = {
    "client": '"fake"', "title": '"a fake (Python)"', "language": '"python"', "library": '"fake-lib"',
    "version": '"1.2.3"', "requires": "[]", "build": "[]", "run": '["{python}", "fake.py"]',
}


def write_spec(folder: Path, **changes: str | None) -> Path:
    """A shim.toml in ``folder`` from GOOD with ``changes`` (None drops a key)."""
    folder.mkdir(parents=True, exist_ok=True)
    fields = {**GOOD, **changes}
    (folder / "shim.toml").write_text("".join(f"{k} = {v}\n" for k, v in fields.items() if v is not None))
    return folder


# -- shim.toml ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("changes", "expected"), [
    ({"colour": '"blue"'}, "unknown key `colour`"),
    ({"run": None}, "missing key `run`"),
    ({"requires": '"node"'}, "`requires` must be a list of strings"),
    ({"build": '[["go", "build"], []]'}, "`build` must be a list of commands"),
    ({"build": '["go", "build"]'}, "`build` must be a list of commands"),
    ({"run": "[]"}, "`run` must be a non-empty list of strings"),
    ({"version": "3"}, "`version` must be a string"),
    ({"client": '"other"'}, "`client` is 'other' but the folder is 'fake'"),
    ({"version": '"1.0/../../x"'}, "cannot name a folder"),
    ({"run": '["{hom}/shim"]'}, "unknown placeholder {hom}"),
    ({"apt": '"make"'}, "`apt` must be a list of strings"),
])
def test_a_wrong_shim_toml_is_one_line_naming_the_file_and_the_field(tmp_path, changes, expected):
    folder = write_spec(tmp_path / "fake", **changes)
    with pytest.raises(ShimError) as caught:
        load_spec(folder)
    message = str(caught.value)
    assert expected in message
    assert str(folder / "shim.toml") in message
    assert "\n" not in message


def test_a_shim_toml_that_is_not_toml_says_so(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "shim.toml").write_text('client = "fake\n')
    with pytest.raises(ShimError, match="not valid TOML"):
        load_spec(tmp_path / "fake")


def test_a_good_shim_toml_loads_with_its_placeholders_substituted(tmp_path):
    spec = load_spec(write_spec(tmp_path / "fake", apt='["make"]', build='[["{python}", "-c", "pass"]]'))
    assert (spec.client, spec.version, spec.requires, spec.apt) == ("fake", "1.2.3", (), ("make",))
    assert spec.command(Path("/built")) == [sys.executable, "fake.py"]
    assert spec.build_commands(Path("/built")) == [[sys.executable, "-c", "pass"]]


def test_discover_finds_every_folder_with_a_shim_toml(tmp_path):
    write_spec(tmp_path / "fake")
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("x")
    assert list(discover(tmp_path)) == ["fake"]
    with pytest.raises(ShimError, match="no shims folder"):
        discover(tmp_path / "missing")


def test_the_repository_has_the_python_proton_shim():
    assert "python-proton" in discover()


# -- version pins ---------------------------------------------------------------------------------------------

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><properties><lib.version>{prop}</lib.version></properties>
<dependencies><dependency><groupId>org.x</groupId><artifactId>lib</artifactId><version>{version}</version>
</dependency></dependencies></project>"""
PINS = {
    "pom literal": ("org.x:lib", {"pom.xml": POM.format(prop="9", version="1.2.3")}, "1.2.3"),
    "pom property": ("org.x:lib", {"pom.xml": POM.format(prop="1.2.3", version="${lib.version}")}, "1.2.3"),
    "package.json and its lock": ("lib", {
        "package.json": json.dumps({"dependencies": {"lib": "1.2.3"}}),
        "package-lock.json": json.dumps({"lockfileVersion": 3, "packages": {"node_modules/lib": {"version": "1.2.3"}}}),
    }, "1.2.3"),
    "go.mod block": ("example.com/lib", {"go.mod": "module m\n\nrequire (\n\texample.com/lib v1.2.3 // indirect\n)\n"},
                     "1.2.3"),
    "go.mod line": ("example.com/lib", {"go.mod": "module m\nrequire example.com/lib v1.2.3\n"}, "1.2.3"),
    "Makefile": ("libx-dev", {"Makefile": "LIB_VERSION := 1.2.3\nall:\n\ttrue\n"}, "1.2.3"),
    "pyproject ==X.*": ("fake_lib", {"pyproject.toml": '[project]\ndependencies = ["fake-lib==1.2.3.*", "b"]\n'},
                        "1.2.3"),
}


@pytest.mark.parametrize("case", PINS)
def test_the_pin_in_the_build_file_is_read(tmp_path, case):
    library, files, version = PINS[case]
    folder = write_spec(tmp_path / "fake", library=f'"{library}"', version=f'"{version}"', run='["{home}/shim"]')
    for name, text in files.items():
        (folder / name).write_text(text)
    spec = load_spec(folder)
    assert [(p.name, v) for p, v in pinned_versions(spec)] == [(name, version) for name in files]
    assert [p.name for p in check_pin(spec)] == list(files)


@pytest.mark.parametrize(("library", "name", "text", "expected"), [
    ("org.x:lib", "pom.xml", POM.format(prop="9", version="1.2.4"), "pins org.x:lib at '1.2.4'"),
    ("org.x:lib", "pom.xml", POM.format(prop="", version="${nope}"), "has no <nope>"),
    ("org.y:other", "pom.xml", POM.format(prop="9", version="1.2.3"), "no <dependency> on org.y:other"),
    ("lib", "package.json", json.dumps({"dependencies": {"lib": "^1.2.3"}}), "at '^1.2.3'"),
    ("example.com/lib", "go.mod", "module m\nrequire example.com/lib v1.2.4\n", "at '1.2.4'"),
    ("libx-dev", "Makefile", "A_VERSION := 1\nB_VERSION := 2\n", "found: A_VERSION, B_VERSION"),
    ("fake-lib", "pyproject.toml", '[project]\ndependencies = ["fake-lib>=1"]\n', "does not pin one version"),
])
def test_a_pin_that_differs_or_is_missing_names_the_file(tmp_path, library, name, text, expected):
    folder = write_spec(tmp_path / "fake", library=f'"{library}"', run='["./shim"]')
    (folder / name).write_text(text)
    with pytest.raises(ShimError) as caught:
        check_pin(load_spec(folder))
    assert expected in str(caught.value)
    assert name in str(caught.value)


def test_a_shim_with_no_build_file_has_no_pin(tmp_path):
    with pytest.raises(ShimError, match="no build file pins fake-lib"):
        check_pin(load_spec(write_spec(tmp_path / "fake", run='["./shim"]')))


def test_a_python_shim_is_pinned_by_the_projects_pyproject(tmp_path):
    folder = write_spec(tmp_path / "fake", library='"python-qpid-proton"', version='"0.39"')
    with pytest.raises(ShimError, match=r"pyproject.toml pins python-qpid-proton at '0.40'"):
        check_pin(load_spec(folder))


@pytest.mark.parametrize("client", sorted(discover()))
def test_every_shim_in_the_repository_pins_what_its_shim_toml_says(client):
    assert check_pin(discover()[client])


# -- builds ---------------------------------------------------------------------------------------------------

def counting_shim(folder: Path, counter: Path, sleep: float = 0.0, fail: bool = False) -> Path:
    """A shim whose build appends a line to ``counter`` (and writes build output into its own folder)."""
    write_spec(folder, build=f'[["{{python}}", "build.py", "{counter}"]]')
    (folder / "build.py").write_text(textwrap.dedent(f"""\
        import sys, time
        time.sleep({sleep})
        open(sys.argv[1], "a").write("built\\n")
        open("output.bin", "w").write("made by the build")
        print("compiling fake.py")
        if {fail}:
            print("error: fake.py:1: something is wrong", file=sys.stderr)
            sys.exit(2)
        """))
    (folder / "fake.py").write_text("print('v1')\n")
    return folder


def test_a_shim_is_built_once_in_the_cache_and_again_when_a_source_changes(tmp_path):
    folder, counter, cache = counting_shim(tmp_path / "src" / "fake", tmp_path / "count"), tmp_path / "count", \
        tmp_path / "cache"
    spec = load_spec(folder)
    home = ensure_built(spec, cache)
    assert home == cache / "shims" / "fake-1.2.3" == home_of(spec, cache)
    assert (home / "fake.py").read_text() == "print('v1')\n" and (home / "output.bin").is_file()
    assert not (folder / "output.bin").exists()  # nothing is built in the source folder
    assert ensure_built(spec, cache) == home
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "fake.cpython-311.pyc").write_bytes(b"x")  # not a source
    assert ensure_built(spec, cache) == home
    assert counter.read_text().count("built") == 1
    (folder / "fake.py").write_text("print('v2')\n")
    ensure_built(spec, cache)
    assert counter.read_text().count("built") == 2
    assert (home / "fake.py").read_text() == "print('v2')\n"


def test_the_cache_folder_is_amqp_conformance_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AMQP_CONFORMANCE_CACHE", str(tmp_path / "elsewhere"))
    spec = load_spec(counting_shim(tmp_path / "src" / "fake", tmp_path / "count"))
    assert ensure_built(spec) == tmp_path / "elsewhere" / "shims" / "fake-1.2.3"


def test_two_builders_at_once_build_once(tmp_path):
    spec = load_spec(counting_shim(tmp_path / "src" / "fake", tmp_path / "count", sleep=0.3))
    homes: list[Path] = []
    threads = [threading.Thread(target=lambda: homes.append(ensure_built(spec, tmp_path / "cache"))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(homes) == 2 and homes[0] == homes[1]
    assert (tmp_path / "count").read_text().count("built") == 1


def test_a_long_build_says_so_on_stderr(tmp_path, monkeypatch):
    monkeypatch.setattr(shim_build, "PROGRESS_AFTER_S", 0.05)
    spec = load_spec(counting_shim(tmp_path / "src" / "fake", tmp_path / "count", sleep=0.3))
    lines: list[str] = []
    ensure_built(spec, tmp_path / "cache", progress=lines.append)
    assert lines[0].startswith("building shim fake (python") and lines[0].endswith(" build.py) ...")
    assert lines[1].startswith("shim fake built in ")


def test_a_failed_build_quotes_its_last_lines_and_names_the_build_folder(tmp_path):
    spec = load_spec(counting_shim(tmp_path / "src" / "fake", tmp_path / "count", fail=True))
    with pytest.raises(ShimError) as caught:
        ensure_built(spec, tmp_path / "cache")
    message = str(caught.value)
    assert "failed (exit 2)" in message and "error: fake.py:1: something is wrong" in message
    assert str(tmp_path / "cache" / "shims" / "fake-1.2.3") in message
    assert "\n" not in message
    with pytest.raises(ShimError):  # never taken as built
        ensure_built(spec, tmp_path / "cache")


def test_a_missing_tool_makes_the_shim_unavailable_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    spec = load_spec(write_spec(tmp_path / "rhea", client='"rhea"', requires='["node", "npm"]'))
    with pytest.raises(ShimUnavailable) as caught:
        ensure_built(spec, tmp_path / "cache")
    assert str(caught.value) == "rhea: needs `node`, `npm` on PATH (install Node.js 18+)"
    spec = load_spec(write_spec(tmp_path / "cpp", client='"cpp"', requires='["make"]', apt='["build-essential"]'))
    with pytest.raises(ShimUnavailable, match=r"cpp: needs `make` on PATH \(apt-get install build-essential\)"):
        ensure_built(spec, tmp_path / "cache")


# -- the conversation, with a fake shim -----------------------------------------------------------------------

FAKE = """\
import json, sys, time
print("fake shim up", file=sys.stderr, flush=True)
for line in sys.stdin:
    command = json.loads(line)
    op = command["op"]
    if op == "events":
        for n in range(2):
            print(json.dumps({"event": "tick", "n": n}), flush=True)
            time.sleep(0.2)
    if op == "garbage":
        print("this is not json", flush=True)
    elif op == "exit":
        print("dying: something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    elif op == "wrong-id":
        print(json.dumps({"id": 999, "ok": True}), flush=True)
    elif op == "slow":
        time.sleep(1.0)
        print(json.dumps({"id": command["id"], "ok": True}), flush=True)
    elif op == "stubborn":
        while True:
            time.sleep(1)
    else:
        print(json.dumps({"id": command["id"], "ok": True, "got": command}), flush=True)
print("fake shim: stdin closed", file=sys.stderr, flush=True)
"""


@pytest.fixture
def fake(tmp_path):
    """The fake shim, started from its folder (its build is empty)."""
    folder = write_spec(tmp_path / "fake")
    (folder / "fake.py").write_text(FAKE)
    with ShimProcess(load_spec(folder), folder, stderr_path=tmp_path / "fake.stderr") as shim:
        yield shim


def test_a_reply_answers_its_command_with_fresh_ids(fake):
    first = fake.request("echo", 5, timeout_ms=100, link="s1")
    assert first == {"id": 1, "ok": True, "got": {"id": 1, "op": "echo", "timeout_ms": 100, "link": "s1"}}
    assert fake.request("echo", 5)["id"] == 2


def test_events_before_a_reply_are_kept_in_order_with_their_arrival_time(fake):
    before = time.monotonic()
    fake.request("events", 5)
    after = time.monotonic()
    assert [e.body for e in fake.events] == [{"event": "tick", "n": 0}, {"event": "tick", "n": 1}]
    assert before <= fake.events[0].at < fake.events[1].at <= after
    # The shim writes them 200 ms apart. Stamped when read, they keep most of that gap even when a loaded machine
    # wakes the reader late for the first; stamped when the reply came, they would have none.
    assert fake.events[1].at - fake.events[0].at >= 0.1


def test_a_line_that_is_not_json_is_an_error_quoting_it(fake):
    with pytest.raises(ShimError, match=r"fake: wrote a line that is not a JSON object: 'this is not json'"):
        fake.request("garbage", 5)


def test_a_reply_to_no_command_is_an_error(fake):
    with pytest.raises(ShimError, match="a reply to no command waiting"):
        fake.request("wrong-id", 5)


def test_an_exit_is_an_error_with_its_status_and_stderr(fake):
    with pytest.raises(ShimError) as caught:
        fake.request("exit", 5)
    assert "fake: exited with status 3 before replying to exit (id 1)" in str(caught.value)
    assert "dying: something broke" in str(caught.value)
    with pytest.raises(ShimError, match="exited with status 3"):
        fake.request("echo", 5)


def test_no_reply_in_time_is_a_timeout_and_a_late_reply_is_set_aside(fake):
    started = time.monotonic()
    with pytest.raises(ShimTimeout, match=r"no reply to slow \(id 1\) within 0.1 s"):
        fake.request("slow", 0.1)
    assert time.monotonic() - started < 0.6  # the reply comes after 1 s: the time-out did not wait for it
    assert fake.request("echo", 5)["id"] == 2
    assert fake.late_replies == [{"id": 1, "ok": True}]


def test_closing_standard_input_ends_the_shim_and_its_stderr_is_kept(fake):
    fake.request("echo", 5)
    assert fake.close() == 0
    assert "fake shim: stdin closed" in fake.stderr_path.read_text()
    with pytest.raises(ShimError, match="was closed"):
        fake.request("echo", 5)


def test_a_shim_that_ignores_the_end_of_its_input_is_killed(fake):
    with pytest.raises(ShimTimeout):
        fake.request("stubborn", 0.05)
    started = time.monotonic()
    assert fake.close(timeout=0.2) < 0
    assert time.monotonic() - started < 2


# -- the python-proton shim against the reference broker --------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    """The embedded reference broker, with nodes that refuse every publish in one way each."""
    broker = Broker()
    broker.provoked_outcomes.update({"q.rejects": "rejected", "q.modifies": "modified", "q.releases": "released"})
    broker.faults.removed.add("q.gone")
    server = ReferenceServer(broker).start()
    yield f"amqp://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture
def proton_shim(tmp_path_factory):
    """The python-proton shim, built into a fresh cache folder."""
    spec = discover()["python-proton"]
    home = ensure_built(spec, tmp_path_factory.mktemp("cache"))
    with ShimProcess(spec, home, stderr_path=tmp_path_factory.mktemp("evidence") / "stderr.log") as shim:
        yield shim


def attach(shim: ShimProcess, link: str, role: str, address: str, snd: str = "unsettled", rcv: str = "first") -> dict:
    return shim.request("attach", 5, link=link, role=role, address=address, snd_settle_mode=snd,
                        rcv_settle_mode=rcv, timeout_ms=3000)


def send(shim: ShimProcess, link: str, *bodies: str, settled: bool = False) -> list[dict]:
    reply = shim.request("send", 5, link=link, messages=[{"body": b, "settled": settled} for b in bodies],
                         timeout_ms=3000)
    assert reply["ok"], reply
    return reply["deliveries"]


def receive(shim: ShimProcess, link: str, outcome: dict, count: int = 1, settle: bool = True) -> list[dict]:
    reply = shim.request("receive", 5, link=link, count=count, outcome=outcome, settle=settle, timeout_ms=3000)
    assert reply["ok"], reply
    return reply["deliveries"]


def events(shim: ShimProcess, count: int, within: float = 2.0) -> list:
    """The shim's events once there are ``count`` (an event may follow the reply it came with by a moment)."""
    deadline = time.monotonic() + within
    while len(shim.events) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return shim.events


def test_python_proton_shim_sends_receives_and_gives_every_outcome(reference, proton_shim):
    shim = proton_shim
    hello = shim.request("hello", 5)
    assert hello == {"id": 1, "ok": True, "client": "python-proton", "library": "python-qpid-proton",
                     "version": "0.40.0", "language": "python"}
    connected = shim.request("connect", 5, url=reference, container_id="interop-1", timeout_ms=3000)
    assert connected == {"id": 2, "ok": True, "remote_container": "amqp-conformance-reference",
                         "remote_properties": {"product": "amqp-conformance-reference",
                                               "version": connected["remote_properties"]["version"]},
                         "remote_offered_capabilities": None, "remote_desired_capabilities": None}
    assert attach(shim, "s1", "sender", "q1")["remote_snd_settle_mode"] == "unsettled"
    assert attach(shim, "r1", "receiver", "q1")["remote_rcv_settle_mode"] == "first"

    sent = send(shim, "s1", "m1", "m2", "m3")
    assert [(d["index"], d["remote_state"], d["remote_settled"], d["locally_settled"]) for d in sent] == \
        [(i, {"type": "accepted"}, True, True) for i in range(3)]
    assert sent[0]["api"] == "Sender.send(); on_accepted; on_settled; Delivery.settle()"
    assert len({d["tag"] for d in sent}) == 3

    [accepted] = receive(shim, "r1", {"type": "accepted"})
    assert (accepted["body"], accepted["disposed"], accepted["settled_on_arrival"], accepted["locally_settled"],
            accepted["delivery_count"]) == ("m1", {"type": "accepted"}, False, True, 0)
    rejected_outcome = {"type": "rejected", "condition": "amqp:precondition-failed", "description": "the test says"}
    [rejected] = receive(shim, "r1", rejected_outcome)
    assert (rejected["body"], rejected["disposed"]) == ("m2", rejected_outcome)
    [released] = receive(shim, "r1", {"type": "released"})
    modified_outcome = {"type": "modified", "delivery_failed": True, "undeliverable_here": False,
                        "message_annotations": {"x-opt-reason": "test"}}
    [modified] = receive(shim, "r1", modified_outcome)
    assert released["body"] == modified["body"] == "m3"  # released: redelivered as it was
    assert (modified["delivery_count"], modified["disposed"]) == (0, modified_outcome)
    [again] = receive(shim, "r1", {"type": "accepted"})
    assert (again["body"], again["delivery_count"]) == ("m3", 1)  # delivery-failed counted
    unsupported = shim.request("receive", 5, link="r1", count=1, outcome={"type": "rejected", "description": "x"})
    assert unsupported["error"]["kind"] == "unsupported"
    timed_out = shim.request("receive", 5, link="r1", count=1, outcome={"type": "accepted"}, timeout_ms=200)
    assert timed_out["error"] == {"kind": "timeout", "description": "0 of 1 messages within 200 ms"}

    # what the sender hears when the broker refuses (the reference's provoked outcomes, with their fields)
    for link, address in (("s-rej", "q.rejects"), ("s-mod", "q.modifies"), ("s-rel", "q.releases")):
        attach(shim, link, "sender", address)
    [rejected_send] = send(shim, "s-rej", "x")
    assert rejected_send["remote_state"] == {"type": "rejected", "condition": "amqp:precondition-failed",
                                             "description": "refused by the broker's admin"}
    assert rejected_send["api"].startswith("Sender.send(); on_rejected; on_settled")
    [modified_send] = send(shim, "s-mod", "x")
    assert modified_send["remote_state"] == {"type": "modified", "delivery_failed": True, "undeliverable_here": True,
                                             "message_annotations": {"x-opt-modified-by": "reference"}}
    assert "on_released (remote_state MODIFIED)" in modified_send["api"]
    [released_send] = send(shim, "s-rel", "x")
    assert (released_send["remote_state"], released_send["remote_settled"]) == ({"type": "released"}, True)
    assert shim.events == []


def test_python_proton_shim_presettles_settles_second_detaches_and_reconnects(reference, proton_shim):
    shim = proton_shim
    assert shim.request("connect", 5, url=reference, container_id="interop-2", timeout_ms=3000)["ok"]
    assert attach(shim, "s2", "sender", "q2", snd="mixed", rcv="second") == \
        {"id": 2, "ok": True, "remote_snd_settle_mode": "mixed", "remote_rcv_settle_mode": "second",
         "remote_properties": None, "remote_max_message_size": 0, "api": "on_link_opened"}
    [presettled] = send(shim, "s2", "p1", settled=True)
    assert (presettled["remote_state"], presettled["locally_settled"]) == (None, True)
    assert presettled["api"] == "Sender.send(); Delivery.settle() before the transfer went out"
    [second] = send(shim, "s2", "u1")  # the receiver (broker) settles second: the shim settles first
    assert (second["remote_state"], second["remote_settled"], second["locally_settled"]) == \
        ({"type": "accepted"}, False, True)
    assert "rcv-settle-mode second" in second["api"]

    assert attach(shim, "r2", "receiver", "q2", rcv="second")["remote_rcv_settle_mode"] == "second"
    got = receive(shim, "r2", {"type": "accepted"}, count=2, settle=False)
    # the sender (the broker) settles each only after the outcome, which the reply does not wait for: the shim
    # settles each then and tells it in a delivery-update event, with the state the broker settled with
    assert [(d["body"], d["remote_state"], d["remote_settled"], d["locally_settled"]) for d in got] == \
        [("p1", None, False, False), ("u1", None, False, False)]
    assert [e.body for e in events(shim, 2)] == [
        {"event": "delivery-update", "link": "r2", "index": index, "tag": got[index]["tag"], "remote_settled": True,
         "locally_settled": True, "remote_state": {"type": "accepted"}} for index in (0, 1)]
    shim.events.clear()

    assert attach(shim, "s3", "sender", "q3", snd="settled")["remote_snd_settle_mode"] == "settled"
    [by_link] = send(shim, "s3", "x")
    assert by_link["locally_settled"] and by_link["remote_state"] is None
    assert "snd-settle-mode settled" in by_link["api"]

    assert shim.request("detach", 5, link="s2", close=False, timeout_ms=3000) == \
        {"id": 9, "ok": True, "remote_closed": False}
    assert shim.request("detach", 5, link="r2", close=True, timeout_ms=3000)["remote_closed"] is True
    refused = shim.request("send", 5, link="s2", messages=[{"body": "x", "settled": False}], timeout_ms=100)
    assert refused["error"] == {"kind": "client", "description": "link 's2' is detached"}

    # the broker closes a link with an error after the attach: an event, as no command waits on it
    assert attach(shim, "s4", "sender", "q.gone")["ok"]
    [lost] = send(shim, "s4", "x")
    assert lost["remote_state"]["condition"] == "amqp:not-found"
    assert [e.body for e in events(shim, 1)] == [{"event": "error", "scope": "link", "link": "s4", "closed": True,
                                              "condition": "amqp:not-found",
                                              "description": "no node at address 'q.gone'"}]

    assert shim.request("close", 5, timeout_ms=3000)["ok"]
    assert shim.request("attach", 5, link="s5", role="sender", address="q", timeout_ms=100)["error"] == \
        {"kind": "client", "description": "not connected: send connect first"}
    assert shim.request("connect", 5, url=reference, container_id="interop-3", timeout_ms=3000)["ok"]
    assert attach(shim, "s1", "sender", "q4")["ok"]  # link names from before are forgotten
    started = time.monotonic()
    assert shim.close() == 0  # closes its connection, then exits 0
    assert time.monotonic() - started < 2
    assert "standard input closed" in shim.stderr_path.read_text()


def test_python_proton_shim_answers_bad_commands_without_exiting(proton_shim):
    shim = proton_shim
    assert shim.request("send", 5, link="s1", messages=[])["error"] == \
        {"kind": "client", "description": "not connected: send connect first"}
    assert shim.request("fly", 5)["error"]["description"] == "unknown op 'fly'"
    assert shim.request("receive", 5)["error"]["kind"] == "client"
    failed = shim.request("connect", 5, url="amqp://127.0.0.1:1", timeout_ms=2000)
    assert failed["ok"] is False and failed["error"]["kind"] == "client"
    assert "refused" in failed["error"]["description"].lower()
    assert shim.request("hello", 5)["ok"]
    assert shim.close() == 0

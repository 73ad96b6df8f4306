"""The ``amqp-conformance`` command: a thin layer over pytest and the reference broker.

Exit codes: 0 nothing FAILed or ERRORed; 1 a FAIL or ERROR; 2 usage (unknown broker, bad URL, broker
not reachable, no case selected), always with one line that says what to do and never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from amqp_conformance.conformance.catalogue import TableError, load_catalogue
from amqp_conformance.conformance.repeat import repeat_run_ids, report_flaky
from amqp_conformance.conformance.selftest import SelftestUsage
from amqp_conformance.fixtures.baseline import BaselineUsage
from amqp_conformance.fixtures.broker_status import STRICT_HELP, stale_blocks
from amqp_conformance.fixtures.brokers import UsageProblem, resolve
from amqp_conformance.fixtures.tls_options import checked_tls_files
from amqp_conformance.fixtures.verdict import Verdict
from amqp_conformance.peers.address import BrokerAddress
from amqp_conformance.reports.records import (
    FRAMES_FILE,
    RESULTS_FILE,
    STALE_CLIENT_FILE,
    new_run_id,
    read_not_applicable,
    read_results,
)
from amqp_conformance.reports.run_dir import ALLURE_RESULTS, SUMMARY_FILE

CONFORMANCE_DIR = Path(__file__).parent


class Usage(Exception):
    """A usage problem: printed as one line, exit 2."""


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds greater than zero (argparse turns the error into exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a time greater than 0 seconds")
    return value


MAX_JOBS = 64  # cases side by side: each holds a few connections and a thread; more only crowds the broker


def positive_jobs(text: str) -> int:
    """An argparse type: how many cases at once, a whole number from 1 to :data:`MAX_JOBS`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cases") from None
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"{text!r}: give from 1 to {MAX_JOBS} cases at once")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (Usage, UsageProblem, TableError, SelftestUsage, BaselineUsage) as exc:
        print(f"amqp-conformance: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("amqp-conformance: interrupted", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``cases | head``): stop quietly, as other Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
        return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its sub-commands."""
    parser = argparse.ArgumentParser(prog="amqp-conformance", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the catalogue against a broker and write results")
    target = run.add_mutually_exclusive_group()
    target.add_argument("--broker", help="broker under test (default: reference, embedded)")
    target.add_argument("--url", help="a running broker: amqp[s]://[user[:password]@]host:port")
    run.add_argument("--profile", help="profile to judge the broker by (default: its own; 'generic' with --url)")
    run.add_argument("-k", dest="keyword", metavar="EXPR", help="only cases matching this pytest -k expression")
    run.add_argument("--out", default="amqp-results", help="output directory (default: ./amqp-results)")
    run.add_argument("--timeout", type=positive_seconds, default=2.0, help="seconds to wait for an expected frame (2)")
    run.add_argument("--quiet-time", type=positive_seconds, default=0.3,
                     help="seconds to watch for a frame that must not arrive (0.3)")
    run.add_argument("--no-idle-probe", action="store_true",
                     help="embedded reference broker: wait out --quiet-time and --timeout as against any broker, "
                          "instead of ending a wait once the broker is provably idle")
    run.add_argument("-v", "--verbose", action="store_true", help="show pytest's line per case")
    run.add_argument("--strict", action="store_true", help=STRICT_HELP)
    run.add_argument("--ca", help="amqps: PEM file of the CA(s) to verify the broker's certificate by")
    run.add_argument("--cert", help="amqps: PEM client certificate to present (SASL EXTERNAL)")
    run.add_argument("--key", help="amqps: PEM private key of --cert (if not in the same file)")
    run.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                     help="time budget of the whole run; then remaining cases are ERROR (default: from case count)")
    run.add_argument("-n", "--jobs", type=positive_jobs, default=1, metavar="N",
                     help="run up to N cases side by side against the one broker (default 1; same verdicts: rows "
                          "that provoke through the broker's admin still run alone, see docs/selftest.md)")
    run.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="run the selected cases N times and report any case whose verdict varies (exit 1)")
    run.add_argument("--junit", metavar="FILE", help="also write the run's verdicts as JUnit XML to FILE "
                                                     "(FAIL a failure, ERROR an error)")
    run.set_defaults(func=cmd_run)

    cases = commands.add_parser("cases", help="list the case catalogue")
    cases.add_argument("--format", choices=("text", "json"), default="text")
    cases.set_defaults(func=cmd_cases)

    serve = commands.add_parser("serve", help="run the reference broker as a standalone server")
    serve.add_argument("--port", type=int, default=5672, help="TCP port on 127.0.0.1 (default 5672; 0 picks one)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                       help="accept only these SASL PLAIN users (repeatable; default: any user, and ANONYMOUS)")
    serve.add_argument("--tls-cert", help="serve amqps: PEM server certificate")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert (if not in the same file)")
    serve.add_argument("--tls-ca", help="PEM CA(s) to verify client certificates by (enables SASL EXTERNAL)")
    serve.add_argument("--expectation-set", default=None, choices=("um-10.11", "core"),
                       help="whose rules to follow where they differ, for a connection whose open hostname names "
                            "no set (default um-10.11; core with --router)")
    serve.add_argument("--no-admin", action="store_true",
                       help="do not take admin requests at $conformance-admin (provocations; see docs/brokers.md)")
    serve.add_argument("--router", action="store_true",
                       help="router mode (profile reference-router): anycast and multicast addresses by prefix")
    serve.add_argument("--anycast-prefix", default="anycast.", help="router mode: anycast address prefix")
    serve.add_argument("--multicast-prefix", default="multicast.", help="router mode: multicast address prefix")
    serve.set_defaults(func=cmd_serve)

    brokers = commands.add_parser("brokers", help="list the known brokers, their launchers and whether each can "
                                                  "start here")
    brokers.add_argument("--format", choices=("text", "json"), default="text")
    brokers.set_defaults(func=cmd_brokers)

    from amqp_conformance.conformance import selftest
    from amqp_conformance.fixtures import baseline, cli_interop, doctor
    from amqp_conformance.reports.cli_report import add_report_parser

    selftest.add_parser(commands)
    add_report_parser(commands)
    baseline.add_parser(commands)
    doctor.add_parser(commands)
    cli_interop.add_parser(commands)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    """``run``: check the broker choice, run pytest on the catalogue, print the summary."""
    import pytest

    if args.repeat < 1:
        raise Usage("--repeat must be at least 1")
    choice = resolve(args.broker, args.url, args.profile)
    tls = checked_tls_files(choice.url, args.ca, args.cert, args.key)  # raises UsageProblem (exit 2)
    if choice.url is not None:
        _preflight(dataclasses.replace(choice.url, tls=tls) if tls is not None else choice.url)
    if choice.spec is not None and not any(launcher.available()[0] for launcher in choice.spec.launchers):
        choice.start()  # no launcher can start it: raises UsageProblem naming each one's reason
    choice.prepare()  # installs what its launcher needs (e.g. from Maven Central), with progress, before pytest
    tls_args = []
    for option in ("ca", "cert", "key"):
        if getattr(args, option) is not None:
            tls_args += [f"--{option}", getattr(args, option)]
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Usage(f"cannot write to --out {out}: {exc.strerror}; choose another directory") from None
    run_id = new_run_id()
    pytest_args = [str(CONFORMANCE_DIR), "-c", str(CONFORMANCE_DIR / "pytest.ini"), "--rootdir", str(CONFORMANCE_DIR),
                   "--amqp-out", str(out), "--amqp-run-id", run_id, "--alluredir", str(out / ALLURE_RESULTS),
                   "--case-timeout", str(args.timeout), "--quiet-time", str(args.quiet_time),
                   "-p", "no:randomly", "-rfE",
                   "-v" if args.verbose else "-q"]
    if args.broker:
        pytest_args += ["--broker", args.broker]
    if args.url:
        pytest_args += ["--broker-url", args.url]
    if args.profile:
        pytest_args += ["--broker-profile", args.profile]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    if args.budget is not None:
        pytest_args += ["--run-budget", str(args.budget)]
    if args.no_idle_probe:
        pytest_args.append("--no-idle-probe")
    if args.jobs > 1:
        pytest_args += ["--amqp-jobs", str(args.jobs)]
    pytest_args += tls_args
    run_ids = repeat_run_ids(run_id, args.repeat)
    for repeat_id in run_ids:  # one pytest session per repetition, each its own run id in the same records
        pytest_args[pytest_args.index("--amqp-run-id") + 1] = repeat_id
        code = pytest.main(pytest_args)
        if "--amqp-append" not in pytest_args:  # the first moved an earlier run away; the others add to it
            pytest_args.append("--amqp-append")
    results = [r for r in read_results(out) if r.get("run_id") in run_ids]
    not_applicable = [n for n in read_not_applicable(out) if n.get("run_id") in run_ids]
    if code == pytest.ExitCode.NO_TESTS_COLLECTED or (code == 0 and not results):
        raise Usage(f"no case matched{f' -k {args.keyword!r}' if args.keyword else ''} for broker "
                    f"{choice.name!r}; list the cases with 'amqp-conformance cases'")
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED) and not results:
        return 2
    write_run_reports(results, not_applicable, out, Path(args.junit) if args.junit else None)
    stale = stale_blocks(results, args.strict)  # said whatever else fails the run
    flaky = report_flaky(results, run_ids) if len(run_ids) > 1 else {}
    failed = any(Verdict(r["verdict"]).blocks_release for r in results)
    blocking = failed or bool(flaky) or stale
    if code == pytest.ExitCode.TESTS_FAILED and not failed:
        print("exit 1: a test failed without recording a result (a harness crash): see the pytest output above")
        blocking = True
    return 1 if blocking or code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else 0


def _preflight(address: BrokerAddress) -> None:
    """One AMQP handshake with the broker at ``address`` before any case; :class:`Usage` (exit 2) naming what
    answered when it is no AMQP 1.0 broker the harness can log in to."""
    from amqp_conformance.fixtures.preflight import PreflightFailed, preflight

    try:
        product = preflight(address)
    except PreflightFailed as exc:
        raise Usage(str(exc)) from None
    print(f"pre-flight: {address.url} speaks AMQP 1.0{f' ({product})' if product else ''}")


def write_run_reports(results: list[dict], not_applicable: list[dict], out: Path, junit: Path | None,
                      width: int | None = None, stale_clients: Sequence[str] = ()) -> None:
    """Print the run's summary and write ``OUT/summary.html`` (and the JUnit XML to ``junit`` when given);
    ``stale_clients``: an interop grid's stale client deviations, described (:func:`.reports.summary.summarize`)."""
    from amqp_conformance.reports.run_junit import run_junit
    from amqp_conformance.reports.summary import render_text, summarize
    from amqp_conformance.reports.summary_html import render_html

    summary = summarize(results, not_applicable, stale_clients)
    outputs = {"results": out / RESULTS_FILE, "frames": out / FRAMES_FILE, "summary": out / SUMMARY_FILE}
    outputs["summary"].write_text(render_html(summary), encoding="utf-8")
    if junit is not None:
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
            junit.write_text(run_junit(results), encoding="utf-8")
        except OSError as exc:
            raise Usage(f"cannot write --junit {junit}: {exc.strerror}; choose another file") from None
        outputs["junit"] = junit
    outputs["allure"] = out / ALLURE_RESULTS
    if stale_clients:
        outputs["stale"] = out / STALE_CLIENT_FILE
    width = width or min(max(shutil.get_terminal_size((100, 24)).columns, 80), 120)
    print(render_text(summary, outputs, width))
    print(f"render:  amqp-conformance report --allure {out}  (the Allure report; one file that opens from disk)")


def cmd_cases(args: argparse.Namespace) -> int:
    """``cases``: the catalogue as text or JSON."""
    catalogue = load_catalogue()
    if args.format == "json":
        print(json.dumps([{
            "id": c.id, "table": c.table, "title": c.title, "scenario": c.scenario,
            "source": {"document": c.source.document, "heading": c.source.heading, "row": c.source.row},
            "expectation_sets": c.expectation_sets, "requires": list(c.requires),
        } for c in catalogue.cases], indent=2))
        return 0
    width = max(len(c.id) for c in catalogue.cases)
    for case in catalogue.cases:
        print(f"{case.id:<{width}}  {','.join(case.expectation_sets):<14}  {case.source.cite()}")
    print(f"{len(catalogue.cases)} cases")
    return 0


def cmd_brokers(args: argparse.Namespace) -> int:
    """``brokers``: every broker, its launchers, and whether each can start on this machine (and why not)."""
    from dataclasses import asdict

    from amqp_conformance.fixtures.broker_status import broker_statuses, format_statuses

    rows = broker_statuses()
    print(json.dumps([asdict(r) for r in rows], indent=2) if args.format == "json" else format_statuses(rows))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: the reference broker in the foreground until interrupted."""
    from amqp_conformance.peers.reference.broker import Broker
    from amqp_conformance.peers.reference.server import ReferenceServer

    users = {}
    for entry in args.user:
        name, sep, password = entry.partition(":")
        if not sep or not name:
            raise Usage(f"--user {name or entry!r}: expected NAME:PASSWORD")
        users[name] = password
    if args.expectation_set is None:  # the router's profile (reference-router) claims core, not um-10.11
        args.expectation_set = "core" if args.router else "um-10.11"
    from amqp_conformance.peers.reference.served import served

    if args.router:  # served: each connection's rules by its open hostname, and the admin node (served.py)
        from amqp_conformance.peers.reference.router import Router

        broker = served(Router)(users=users, anycast_prefix=args.anycast_prefix,
                                multicast_prefix=args.multicast_prefix)
    else:
        broker = served(Broker)(users=users)
    broker.policy = broker.policy_for(args.expectation_set)
    if not args.no_admin:  # the profile's [admin] node: what `run --url ... --profile reference` provokes through
        from amqp_conformance.fixtures.admin import ReferenceAdmin
        from amqp_conformance.fixtures.amqp_admin import endpoint

        broker.admin_endpoint = endpoint(ReferenceAdmin(broker))
    tls = None
    if args.tls_cert or args.tls_key or args.tls_ca:
        from amqp_conformance.peers.tls import TlsFiles, TlsSetupError, server_context

        try:
            tls = server_context(TlsFiles(args.tls_ca, args.tls_cert, args.tls_key))
        except TlsSetupError as exc:
            raise Usage(str(exc)) from None
    try:
        server = ReferenceServer(broker, host=args.host, port=args.port, tls=tls)
    except OSError as exc:
        raise Usage(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; "
                    f"choose another port with --port (0 picks a free one)") from None
    print(f"reference {'router' if args.router else 'broker'} listening on "
          f"{'amqps' if tls else 'amqp'}://{server.host}:{server.port} "
          f"(expectation set {args.expectation_set} unless a connection's open hostname names another; "
          f"{'no admin' if args.no_admin else 'admin at $conformance-admin'}; Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # run as ``python -m``: the installed module's main, so its Usage is the one raised
    from amqp_conformance.conformance.cli import main as installed_main

    sys.exit(installed_main())

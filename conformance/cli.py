"""The ``amqp-conformance`` command: a thin layer over pytest and the reference broker.

Exit codes: 0 nothing FAILed or ERRORed; 1 a FAIL or ERROR; 2 usage (unknown broker, bad URL, broker
not reachable, no case selected), always with one line that says what to do and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from amqp_conformance.conformance.catalogue import TableError, load_catalogue
from amqp_conformance.fixtures.brokers import UsageProblem, resolve
from amqp_conformance.reports.records import new_run_id, read_results

CONFORMANCE_DIR = Path(__file__).parent
VERDICT_ORDER = ("PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "ERROR", "INFO")


class Usage(Exception):
    """A usage problem: printed as one line, exit 2."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (Usage, UsageProblem, TableError) as exc:
        print(f"amqp-conformance: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("amqp-conformance: interrupted", file=sys.stderr)
        return 2


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
    run.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an expected frame (2)")
    run.add_argument("-v", "--verbose", action="store_true", help="show pytest's line per case")
    run.set_defaults(func=cmd_run)

    cases = commands.add_parser("cases", help="list the case catalogue")
    cases.add_argument("--format", choices=("text", "json"), default="text")
    cases.set_defaults(func=cmd_cases)

    serve = commands.add_parser("serve", help="run the reference broker as a standalone server")
    serve.add_argument("--port", type=int, default=5672, help="TCP port on 127.0.0.1 (default 5672; 0 picks one)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                       help="accept only these SASL PLAIN users (repeatable; default: any user, and ANONYMOUS)")
    serve.add_argument("--expectation-set", default="um-10.11", choices=("um-10.11", "core"),
                       help="whose rules to follow where they differ (default um-10.11)")
    serve.set_defaults(func=cmd_serve)

    from amqp_conformance.reports.cli_report import add_report_parser

    add_report_parser(commands)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    """``run``: check the broker choice, run pytest on the catalogue, print the summary."""
    import pytest

    choice = resolve(args.broker, args.url, args.profile)
    if choice.url is not None:
        from amqp_conformance.fixtures.brokers import check_reachable

        check_reachable(choice.url)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Usage(f"cannot write to --out {out}: {exc.strerror}; choose another directory") from None
    run_id = new_run_id()
    pytest_args = [str(CONFORMANCE_DIR), "-c", str(CONFORMANCE_DIR / "pytest.ini"), "--rootdir", str(CONFORMANCE_DIR),
                   "--amqp-out", str(out), "--amqp-run-id", run_id, "--alluredir", str(out / "allure-results"),
                   "--case-timeout", str(args.timeout), "-p", "no:randomly", "-rfE",
                   "-v" if args.verbose else "-q"]
    if args.broker:
        pytest_args += ["--broker", args.broker]
    if args.url:
        pytest_args += ["--broker-url", args.url]
    if args.profile:
        pytest_args += ["--broker-profile", args.profile]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    code = pytest.main(pytest_args)
    results = [r for r in read_results(out) if r.get("run_id") == run_id]
    if code == pytest.ExitCode.NO_TESTS_COLLECTED or (code == 0 and not results):
        raise Usage(f"no case matched{f' -k {args.keyword!r}' if args.keyword else ''} for broker "
                    f"{choice.name!r}; list the cases with 'amqp-conformance cases'")
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED) and not results:
        return 2
    print_summary(results, out)
    blocking = any(r["verdict"] in ("FAIL", "ERROR") for r in results)
    return 1 if blocking or code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else 0


def print_summary(results: list[dict], out: Path) -> None:
    """Counts per verdict, one line per case that did not pass, and where the outputs are."""
    counts = Counter(r["verdict"] for r in results)
    print()
    print("verdicts: " + ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if counts[v]))
    for record in results:
        if record["verdict"] != "PASS":
            reason = record["reason"].splitlines()[0] if record["reason"] else ""
            print(f"  {record['verdict']:<11} {record['case_id']} [{record['expectation_set']}] {reason[:160]}")
    print(f"results: {out / 'results.jsonl'}")
    print(f"frames:  {out / 'frames.jsonl'}")
    print(f"allure:  {out / 'allure-results'} (render: allure serve {out / 'allure-results'})")


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
    broker = Broker(users=users)
    broker.policy = broker.policy_for(args.expectation_set)
    try:
        server = ReferenceServer(broker, host=args.host, port=args.port)
    except OSError as exc:
        raise Usage(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; "
                    f"choose another port with --port (0 picks a free one)") from None
    print(f"reference broker listening on amqp://{server.host}:{server.port} "
          f"(expectation set {args.expectation_set}; Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

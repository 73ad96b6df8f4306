"""Benchmark (not a test): the CPU the catalogue costs against the embedded reference broker, and where.

First, without sockets or threads: the broker's CPU for one sans-I/O round trip (connect, publish, consume,
accept, close; median of ``--round-trips``) and for one dispatch pass of a selector consumer over 50
stored messages it does not select. Then it runs the catalogue (``--quiet-time 0``: no waiting for absent
frames, so the run is CPU-bound) in a child process ``--repeat`` times and prints, as medians:
  - wall seconds of the pytest run and its process CPU (user + system, all threads);
  - the CPU of the reference broker's server thread(s) alone (``time.thread_time`` at the loop's end);
  - per case: process CPU and broker CPU divided by the number of cases.
With ``--profile N`` one more run profiles the broker thread with cProfile and prints its N most costly
functions (cumulative), which shows what the broker spends its CPU on (decoding, selectors, proton).

    python benchmarks/broker_cpu_bench.py [--repeat 3] [--profile 25] [--broker reference-router] [-k EXPR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def _inner(out: str, broker: str, keyword: str, profile_to: str) -> int:
    """Child process: run the catalogue with the server loop instrumented; print one JSON line of figures."""
    import cProfile

    import pytest
    from amqp_conformance.peers.reference.server import ReferenceServer

    broker_cpu: list[float] = []
    profiles: list[cProfile.Profile] = []
    original = ReferenceServer.serve_forever

    def measured(self: ReferenceServer) -> None:
        profiler = cProfile.Profile() if profile_to else None
        if profiler is not None:
            profiler.enable()
        try:
            original(self)
        finally:
            if profiler is not None:
                profiler.disable()
                profiles.append(profiler)
            broker_cpu.append(time.thread_time())

    ReferenceServer.serve_forever = measured  # type: ignore[method-assign]
    args = [str(CONFORMANCE), "-c", str(CONFORMANCE / "pytest.ini"), "--rootdir", str(CONFORMANCE), "-q",
            "-p", "no:randomly", "-p", "no:xdist", "--amqp-out", out, "--quiet-time", "0", "--broker", broker]
    if keyword:
        args += ["-k", keyword]
    start = time.perf_counter()
    code = pytest.main(args)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if profile_to and profiles:
        import pstats

        stats = pstats.Stats(profiles[0])
        for more in profiles[1:]:
            stats.add(more)
        stats.dump_stats(profile_to)
    results = [json.loads(line) for line in (Path(out) / "results.jsonl").read_text().splitlines()]
    verdicts: dict[str, int] = {}
    for record in results:
        verdicts[record["verdict"]] = verdicts.get(record["verdict"], 0) + 1
    print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "user": usage.ru_utime,
                      "broker_cpu": sum(broker_cpu), "cases": len(results), "verdicts": verdicts,
                      "exit": int(code)}))
    return 0


def run_once(broker: str, keyword: str, profile_to: str = "") -> dict:
    """One child run of the catalogue; its figures."""
    with tempfile.TemporaryDirectory(prefix="amqp-cpu-bench-") as out:
        command = [sys.executable, __file__, "--inner", out, "--broker", broker, "-k", keyword,
                   "--profile-to", profile_to]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"the child run printed no figures:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def _pump(client, server, broker_cpu: list[float]) -> None:
    """Move bytes between a client engine and a broker connection until both are quiet; broker CPU is summed."""
    for _ in range(50):
        out = client.data_to_send()
        start = time.process_time()
        if out:
            server.receive_data(out)
        back = server.data_to_send()
        broker_cpu[0] += time.process_time() - start
        if back:
            client.receive_data(back)
        client.events()
        if not out and not back:
            return


def sansio_round_trips(runs: int) -> list[float]:
    """Broker-side CPU seconds of each sans-I/O round trip (no sockets, one thread): connect, attach a
    publisher and a subscriber, publish one unsettled message, receive it, accept it, close."""
    from amqp_conformance.peers.engine import CapturingEngine
    from amqp_conformance.peers.reference.broker import Broker
    from proton import Delivery, Message

    broker = Broker()
    costs = []
    for i in range(runs + 1):
        spent = [0.0]
        server = broker.accept(f"bench-{i}")
        client = CapturingEngine(server=False)
        client.connection.container = f"bench-{i}"
        client.connection.open()
        session = client.connection.session()
        session.open()
        sender = session.sender("pub")
        sender.target.address = "bench.sansio"
        sender.open()
        receiver = session.receiver("sub")
        receiver.source.address = "bench.sansio"
        receiver.open()
        receiver.flow(1)
        _pump(client, server, spent)
        sender.delivery(b"t")
        sender.send(Message(body="m", properties={"n": i}).encode())
        sender.advance()
        _pump(client, server, spent)
        delivery = receiver.current
        if delivery is None:
            raise SystemExit("sans-I/O round trip: the subscriber got no message (the benchmark is broken)")
        receiver.recv(delivery.pending)
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        client.connection.close()
        _pump(client, server, spent)
        if i:  # the first run warms imports up
            costs.append(spent[0])
    return costs


def selector_passes(pending: int, passes: int) -> float:
    """CPU seconds of ``passes`` dispatch passes (take_for) of a selector consumer over ``pending`` stored
    messages its selector does not select."""
    from amqp_conformance.peers.reference.broker import Broker, Consumer
    from amqp_conformance.peers.reference.selector import parse
    from proton import Message

    broker = Broker()
    node = broker.store.node("bench.selector")
    for n in range(pending):
        node.publish(Message(body="m", properties={"colour": "blue", "n": n}).encode())
    consumer = Consumer(None, node, node.queue, selector=parse("colour = 'red'"))  # type: ignore[arg-type]
    start = time.process_time()
    for _ in range(passes):
        assert broker.take_for(consumer) is None
    return time.process_time() - start


def main() -> int:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median is printed)")
    parser.add_argument("--broker", default="reference", help="reference or reference-router")
    parser.add_argument("-k", dest="keyword", default="", help="only cases matching this pytest -k expression")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="one more run with cProfile on the broker thread; print its N costliest functions")
    parser.add_argument("--round-trips", type=int, default=200, help="sans-I/O round trips measured")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return _inner(args.inner, args.broker, args.keyword, args.profile_to)

    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(shared machine: figures are noisy)")
    trips = sansio_round_trips(args.round_trips)
    print(f"sans-I/O round trip (connect, publish, consume, accept, close; no sockets): broker CPU median "
          f"{statistics.median(trips) * 1000:.2f} ms (min {min(trips) * 1000:.2f}; {len(trips)} runs)")
    spent = selector_passes(50, 200)
    print(f"selector consumer, 50 stored messages it does not select: {spent / 200 * 1000:.3f} ms CPU per "
          f"dispatch pass")
    runs = [run_once(args.broker, args.keyword) for _ in range(args.repeat)]
    cases = runs[-1]["cases"]
    print(f"broker {args.broker}, --quiet-time 0: {cases} cases, verdicts {runs[-1]['verdicts']} "
          f"(median of {len(runs)} runs)")
    for key, label in (("wall", "wall"), ("cpu", "process CPU (user+sys)"), ("user", "process user CPU"),
                       ("broker_cpu", "broker thread CPU")):
        values = [r[key] for r in runs]
        print(f"  {label}: {statistics.median(values):.2f} s (runs: {', '.join(f'{v:.2f}' for v in values)}); "
              f"per case {statistics.median(values) / max(cases, 1) * 1000:.1f} ms")
    if args.profile:
        import pstats

        with tempfile.TemporaryDirectory(prefix="amqp-cpu-profile-") as tmp:
            target = str(Path(tmp) / "broker.prof")
            run_once(args.broker, args.keyword, target)
            print(f"broker thread profile (cProfile, top {args.profile} by cumulative time):")
            pstats.Stats(target, stream=sys.stdout).sort_stats("cumulative").print_stats(args.profile)
            pstats.Stats(target, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())

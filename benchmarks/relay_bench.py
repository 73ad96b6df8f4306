"""Benchmark (not a test): what the interop relay (peers/relay.py) adds to a connection.

Prints, on this machine, direct to an echo server and through :class:`FrameRelay` to the same server:
  1. throughput (MB/s of payload, sent and echoed back at once): a stream of AMQP transfer frames (every
     frame split and decoded by the relay, both ways) and a stream of noise (decoding stops at the first
     bytes, so this is the relay's byte moving alone);
  2. the round trip of one small frame (an 8-byte empty frame, then a 60-byte flow frame) sent and echoed
     back, median and 90th percentile in microseconds, and what the relay adds.

The echo server runs in a child process, so only the client and the relay share this process (as the harness
and its relay do; the shims are other processes). Run: ``python benchmarks/relay_bench.py [--mb 64]``.
Figures on a shared machine are noisy: each is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time

from amqp_conformance.peers.frames import AMQP_HEADER, described, encode_frame
from amqp_conformance.peers.relay import FrameRelay


def echo_server() -> None:
    """Child process: echo every connection's bytes back, one thread a connection; prints the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)

    def echo(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while chunk := conn.recv(262144):
                conn.sendall(chunk)

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def connect(port: int) -> socket.socket:
    """A client socket to 127.0.0.1:``port``, Nagle off."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def throughput(port: int, stream: bytes) -> float:
    """MB/s of ``stream`` sent to ``port`` and read back whole (echoed)."""
    sock = connect(port)
    received = 0

    def read() -> None:
        nonlocal received
        while received < len(stream):
            chunk = sock.recv(262144)
            if not chunk:
                return
            received += len(chunk)

    reader = threading.Thread(target=read)
    start = time.perf_counter()
    reader.start()
    sock.sendall(stream)
    reader.join()
    elapsed = time.perf_counter() - start
    sock.close()
    assert received == len(stream), "echo incomplete"
    return len(stream) / elapsed / 1e6


def round_trips(port: int, frame: bytes, count: int) -> list[float]:
    """Microseconds per round trip of ``frame`` (sent, then read back whole), ``count`` times."""
    sock = connect(port)
    sock.sendall(AMQP_HEADER)
    got = 0
    while got < len(AMQP_HEADER):
        got += len(sock.recv(64))
    times = []
    for _ in range(count):
        start = time.perf_counter_ns()
        sock.sendall(frame)
        got = 0
        while got < len(frame):
            got += len(sock.recv(65536))
        times.append((time.perf_counter_ns() - start) / 1000)
    sock.close()
    return times


def amqp_stream(total: int, payload: int) -> bytes:
    """AMQP header, open, then transfer frames of ``payload`` bytes each until ``total`` bytes."""
    head = AMQP_HEADER + encode_frame(described("open", container_id="bench"))
    transfer = encode_frame(described("transfer", handle=0, delivery_id=0, delivery_tag=b"t"), payload=b"x" * payload)
    return head + transfer * (total // len(transfer))


def p90(values: list[float]) -> float:
    """90th percentile."""
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    """Run the figures and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="megabytes a throughput run (default 64)")
    parser.add_argument("--frame", type=int, default=32768, help="transfer payload bytes (default 32768)")
    parser.add_argument("--trips", type=int, default=5000, help="round trips a latency run (default 5000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        echo_server()
        return

    child = subprocess.Popen([sys.executable, __file__, "--echo-server"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        framed = amqp_stream(args.mb * 1_000_000, args.frame)
        noise = b"\xff" * len(framed)
        flow = encode_frame(described("flow", incoming_window=1, next_outgoing_id=0, outgoing_window=1))
        small = {"empty (8 B)": encode_frame(b""), f"flow ({len(flow)} B)": flow}
        print(f"throughput, {len(framed) / 1e6:.0f} MB echoed (MB/s each way, median of {args.repeat}):")
        for name, stream in ((f"AMQP transfers of {args.frame} B, decoded", framed), ("noise, not decoded", noise)):
            direct = statistics.median(throughput(port, stream) for _ in range(args.repeat))
            relayed = []
            for _ in range(args.repeat):
                with FrameRelay("127.0.0.1", port, "bench") as relay:
                    relayed.append(throughput(relay.port, stream))
                    relay.wait_closed(0, 10)
            print(f"  {name:40s} direct {direct:8.1f}   relay {statistics.median(relayed):8.1f}")
        print(f"round trip of one frame, {args.trips} trips (µs, median / p90):")
        for name, frame in small.items():
            direct_runs = [round_trips(port, frame, args.trips) for _ in range(args.repeat)]
            relay_runs = []
            for _ in range(args.repeat):
                with FrameRelay("127.0.0.1", port, "bench") as relay:
                    relay_runs.append(round_trips(relay.port, frame, args.trips))
            direct = [t for run in direct_runs for t in run]
            relayed = [t for run in relay_runs for t in run]
            added = statistics.median(relayed) - statistics.median(direct)
            print(f"  {name:14s} direct {statistics.median(direct):7.1f} / {p90(direct):7.1f}   relay "
                  f"{statistics.median(relayed):7.1f} / {p90(relayed):7.1f}   added {added:7.1f} "
                  f"({added / 2:.1f} a hop: each trip crosses the relay twice)")
    finally:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main()

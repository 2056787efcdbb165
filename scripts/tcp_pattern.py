#!/usr/bin/python3
"""SGP's exchange pattern over plain TCP on the namespace hosts, against gossamer-sim.

What it separates: whether a gap between a real SGP run and its simulation
comes from Gossamer's code or from the network model. The same traffic runs
with no Gossamer code at all:

  real: on 8 namespace hosts in two islands shaped as validate-sim's --shape
        (scripts/validate_sim.py; tests/hosts/hosts.py, tc tbf links,
        each tbf's queue --queue-ms), one process per host; at step k rank r
        sends --bytes to rank r + 2^(k mod log2 n) over a TCP connection kept
        for the run (after --delay-ms of its own when the peer is in another
        island, as faults.island_delay holds a message), waits for as much
        from rank r - 2^(k mod log2 n) (read by a thread per in-peer as it
        comes, as a transport's I/O thread does), then pauses --compute-ms: SGP's
        synchronous step over the directed exponential graph with one peer;
  sim:  gossamer-sim runs examples/configs/sgp.yaml on the same platform
        (--tbf --receive-unshaped), its messages the same size (--params),
        --compute-ms of compute per step.

With --initcwnd N each round also runs the real side on hosts whose TCP
connections start with a window of N segments (hosts.py run --initcwnd),
which takes TCP's window growth out of the real step.

Seconds per step on each side: per rank, (time at the last step - time at
step --skip) / the steps between, averaged over ranks. Rounds interleave the
two sides; the medians and their ratio (sim / real) are printed, with the
tbf drops and TCP retransmissions of the real runs (hosts.py --stats), and
written to results/tcp-pattern.json.

    scripts/tcp-pattern.sh [--shape lan-wan] [--queue-ms 100] [--steps 60] [--rounds 3] [--initcwnd 300]

Inside hosts.py (internal): tcp_pattern.py --ranks ...  starts the ranks;
tcp_pattern.py --rank R ... is one of them.
"""
import argparse
import json
import math
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from validate_sim import ISLANDS, SHAPES, parse_regimes, write_spec  # scripts/ is on the path when run as a script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))
PORT = 9300
READ_TIMEOUT = 120  # seconds a rank waits for one message


def offsets(n):
    """The directed exponential graph's offsets for n ranks (a power of two): 1, 2, 4, ..., n/2."""
    return [1 << j for j in range(int(math.log2(n)))]


def recv_exactly(conn, count):
    got = 0
    while got < count:
        chunk = conn.recv(min(1 << 20, count - got))
        if not chunk:
            raise SystemExit("tcp-pattern: a peer closed its connection")
        got += len(chunk)


def one_rank(args):
    """One rank: connects to its out-peers, takes its in-peers' connections, runs the steps, prints its step ends."""
    hosts = json.loads(os.environ["GOSSAMER_HOSTS"])
    n, r = len(hosts), args.rank
    server = socket.create_server(("0.0.0.0", PORT + r), backlog=n)
    server.settimeout(30)
    inbound = {}

    def accept():
        for _ in offsets(n):
            c, _ = server.accept()
            inbound[int(recv_text(c, 8))] = c

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    outbound = {}
    for d in offsets(n):
        dst = (r + d) % n
        for _ in range(100):  # the peer's listener may not be up yet
            try:
                s = socket.create_connection((hosts[dst]["address"], PORT + dst), timeout=30)
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit(f"tcp-pattern: rank {r} cannot reach rank {dst}")
        s.sendall(f"{r:8d}".encode())
        outbound[dst] = s
    acceptor.join()
    payload = b"\0" * args.bytes
    ends = []
    hops = offsets(n)
    # Each in-peer's messages are read as they come, by a thread of their own,
    # as a transport's I/O thread reads its sockets: the kernel's receive
    # buffer never fills while the rank is busy with another peer.
    arrived = {src: queue.Queue() for src in inbound}

    def reader(src):
        """Reads rank `src`'s messages in step order; puts None per message, or the error that ended it."""
        try:
            for k in range(args.steps):
                if (r - hops[k % len(hops)]) % n == src:
                    recv_exactly(inbound[src], args.bytes)
                    arrived[src].put(None)
        except BaseException as e:  # SystemExit from recv_exactly too: the main loop reports it
            arrived[src].put(e)

    readers = [threading.Thread(target=reader, args=(src,), daemon=True) for src in inbound]
    for t in readers:
        t.start()
    for k in range(args.steps):
        d = hops[k % len(hops)]
        dst, src = (r + d) % n, (r - d) % n

        def send(dst=dst):
            if hosts[dst]["island"] != hosts[r]["island"]:
                time.sleep(args.delay_ms / 1e3)
            outbound[dst].sendall(payload)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            error = arrived[src].get(timeout=READ_TIMEOUT)
        except queue.Empty:
            raise SystemExit(f"tcp-pattern: rank {r}: nothing from rank {src} within {READ_TIMEOUT} s") from None
        if error is not None:
            raise SystemExit(f"tcp-pattern: rank {r}: reading rank {src}: {error}")
        sender.join()
        time.sleep(args.compute_ms / 1e3)
        ends.append(time.time())
    print(json.dumps({"rank": r, "ends": ends}))


def recv_text(conn, count):
    data = b""
    while len(data) < count:
        data += conn.recv(count - len(data))
    return data.decode()


def all_ranks(args):
    """Inside hosts.py: one process per host, in its namespace; prints their step ends as one JSON list."""
    hosts = json.loads(os.environ["GOSSAMER_HOSTS"])
    me = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps), "--bytes", str(args.bytes),
          "--delay-ms", str(args.delay_ms), "--compute-ms", str(args.compute_ms)]
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "hosts", "hosts.py"), "exec",
                               h["name"], "--", *me, "--rank", str(r)], stdout=subprocess.PIPE, text=True)
             for r, h in enumerate(hosts)]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"tcp-pattern: a rank failed ({p.returncode})")
        out.append(json.loads(text))
    print(json.dumps(out))


def per_step(ends_by_rank, skip):
    return statistics.mean((e[-1] - e[skip]) / (len(e) - 1 - skip) for e in ends_by_rank)


def real_side(args, spec, stats, initcwnd=None):
    """One real run on the namespace hosts (TCP windows of `initcwnd` segments if set): its seconds per step and
    what its links saw (hosts.py --stats)."""
    window = ["--initcwnd", str(initcwnd)] if initcwnd else []
    cmd = [sys.executable, os.path.join(ROOT, "tests", "hosts", "hosts.py"), "run", spec, "--stats", stats,
           "--queue-ms", str(args.queue_ms), *window, "--", sys.executable, os.path.abspath(__file__), "--ranks",
           "--steps", str(args.steps), "--bytes", str(args.bytes), "--delay-ms", str(args.delay_ms),
           "--compute-ms", str(args.compute_ms)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"tcp-pattern: the real run failed ({p.returncode}): {p.stderr[-2000:]}")
    ranks = json.loads(p.stdout.strip().splitlines()[-1])
    with open(stats) as f:
        seen = json.load(f)
    return per_step([r["ends"] for r in sorted(ranks, key=lambda r: r["rank"])], args.skip), seen


def sim_side(args, network, tmp):
    out = os.path.join(tmp, "sim.json")
    cmd = [os.path.join(BUILD, "apps", "gossamer-sim"), os.path.join(ROOT, "examples", "configs", "sgp.yaml"),
           "--world-size", str(network["world_size"]), "--steps", str(args.steps),
           "--step-seconds", str(args.compute_ms / 1e3), "--params", str((args.bytes - 8) // 4), "--tbf",
           "--receive-unshaped", "--inside-latency-us", "30", "--json", out,
           "--cfg", "network/latency-factor:1", "--cfg", "network/bandwidth-factor:1",
           "--set", "network.islands=" + json.dumps(network["islands"], separators=(",", ":")),
           "--set", f"network.inside_gbps={network['inside_gbps']}",
           "--set", f"network.between_gbps={network['between_gbps']}",
           "--set", f"network.between_delay_ms={args.delay_ms}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    with open(out) as f:
        ends = json.load(f)["step_end_seconds"]
    return (ends[-1] - ends[args.skip]) / (len(ends) - 1 - args.skip)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="lan-wan", choices=sorted(SHAPES))
    ap.add_argument("--queue-ms", type=float, default=100)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=407088, help="per message (the quickstart model's SGP message)")
    ap.add_argument("--delay-ms", type=float, default=None, help="default: the shape's delay between islands")
    ap.add_argument("--compute-ms", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--initcwnd", type=int, default=None,
                    help="also run the real side with TCP connections that start with this many segments "
                    "(hosts.py --initcwnd), interleaved")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "tcp-pattern.json"))
    ap.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank is not None:
        return one_rank(args)
    if args.ranks:
        return all_ranks(args)
    inside, between, delay = SHAPES[args.shape]
    network = {"world_size": 8, "islands": ISLANDS, "inside_gbps": inside, "between_gbps": between}
    if args.delay_ms is None:
        args.delay_ms = delay
    n = network["world_size"]
    parse_regimes(f"{args.queue_ms:g}" + (f":{args.initcwnd}" if args.initcwnd is not None else ""),
                  "tcp-pattern: --queue-ms:--initcwnd")  # refuses what hosts.py would
    if n < 2 or n & (n - 1) or args.steps <= args.skip + 1 or args.bytes < 12 or (args.bytes - 8) % 4:
        raise SystemExit("tcp-pattern: a world size that is a power of two (>= 2), --steps > --skip + 1, "
                         "and --bytes = 8 + 4P (P >= 1)")
    reals, sims, drops, resent, widened, wide_drops = [], [], [], [], [], []
    wide = f" {'real iw ' + str(args.initcwnd):>14}" if args.initcwnd is not None else ""
    print(f"{'round':>5} {'real s/step':>12}{wide} {'sim s/step':>12} {'drops':>7} {'resent':>7}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(os.path.join(tmp, "spec.yaml"), args.shape, args.delay_ms)
        for k in range(args.rounds):
            real, seen = real_side(args, spec, os.path.join(tmp, "links.json"))
            if args.initcwnd is not None:
                wide_real, wide_seen = real_side(args, spec, os.path.join(tmp, "links-wide.json"), args.initcwnd)
                widened.append(wide_real)
                wide_drops.append(sum(wide_seen["island_link_drops"]) + sum(wide_seen["host_link_drops"]))
            sim = sim_side(args, network, tmp)
            reals.append(real)
            sims.append(sim)
            drops.append(sum(seen["island_link_drops"]) + sum(seen["host_link_drops"]))
            resent.append(sum(seen["tcp_retransmitted_segments"]))
            wide = f" {widened[-1]:14.4f}" if args.initcwnd is not None else ""
            print(f"{k:>5} {real:12.4f}{wide} {sim:12.4f} {drops[-1]:>7} {resent[-1]:>7}", flush=True)
    real, sim = statistics.median(reals), statistics.median(sims)
    result = {"arguments": vars(args), "network": network, "real_seconds_per_step": real,
              "sim_seconds_per_step": sim, "ratio": sim / real, "real_rounds": reals, "sim_rounds": sims,
              "drops": drops, "tcp_retransmitted_segments": resent}
    print(f"median: real {real:.4f} s/step, simulated {sim:.4f} s/step, ratio {sim / real:.3f}")
    if args.initcwnd is not None:
        wide = statistics.median(widened)
        result.update({"real_initcwnd_seconds_per_step": wide, "ratio_initcwnd": sim / wide,
                       "real_initcwnd_rounds": widened, "initcwnd_drops": wide_drops})
        print(f"median with an initial window of {args.initcwnd} segments: real {wide:.4f} s/step, "
              f"ratio {sim / wide:.3f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

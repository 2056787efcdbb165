#!/usr/bin/python3
"""Test hosts: network namespaces on this machine that stand in for the hosts
of a multi-host job, grouped in islands whose links are shaped with tc tbf.

Layout (every name starts with ``gsm<pid>-``, the harness's process id, so
that two runs never collide and a run killed with SIGKILL is cleaned up by
the next one):

- one "fabric" namespace holding one Linux bridge per island
  (``br<i>``, gateway address 10.231.<i>.254/24) and routing between them;
- one namespace per host (``h<i>-<j>``) with a veth ``eth0`` on its island's
  bridge, address 10.231.<i>.<j+1>/24 and a default route via the gateway.

Shaping: each host's ``eth0`` egress carries a tbf at ``network.inside_gbps``
(what the host can send at all); each bridge's egress in the fabric
namespace carries a tbf at ``network.between_gbps``, which only routed
packets pass: traffic from other islands into island i. Each tbf has a
bucket of about 1 ms at its rate (at least 64 KiB) and a queue of 100 ms at
its rate (``--queue-ms``); a packet that finds the queue full is dropped,
and TCP sends it again. Propagation delay
is not shaped here (this kernel has no netem): a job adds it itself
(``network.between_delay_ms`` is passed on as GOSSAMER_HOSTS_DELAY_MS).

Only the namespaces and the 10.231.0.0/16 addresses created here are used,
never the machine's own interfaces; everything is removed on exit, after an
exception, SIGINT or SIGTERM. Where namespaces cannot be made (not root, no
CAP_NET_ADMIN, no veth or bridge support) the harness exits with status 77,
which ctest reports as skipped.

Spec: a gossamer job config (YAML; ``gossamer-config --check`` loads it).
One host per rank; the harness reads ``world_size`` and the ``network:``
section and ignores every other section (a whole job config will do)::

    world_size: 8                # hosts (one per rank)
    network:
      islands: [[0, 1, 2, 3], [4, 5, 6, 7]]   # a partition of 0..world_size-1
      inside_gbps: 10            # each host's link, Gbit/s
      between_gbps: 0.1          # into each island from the others, Gbit/s
      between_delay_ms: 20       # passed on to the job (GOSSAMER_HOSTS_DELAY_MS)

A key left out has the job's default: world_size 4, islands [] (one island
of every rank), inside_gbps 10, between_gbps 10, between_delay_ms 0. Hosts
are numbered island by island, host r running rank r, so island 0 must
hold ranks 0..n0-1, island 1 the next n1 ranks, and so on (in any order
inside an island); 1 to 200 islands of 1 to 250 ranks. A rate must lie in
[1e-06, 1000] Gbit/s (1 kbit/s to 1 Tbit/s, what tbf shapes here); it
becomes the tc rate of the same value (0.1 -> 100mbit, 1 -> 1gbit); the
delay in [0, 60000] ms. A spec that breaks one of these is refused naming
the file and the key.

Usage::

    hosts.py run SPEC [--stats FILE] [--queue-ms MS] [--initcwnd N] [--timeout S] -- COMMAND...
                                      # set up, run COMMAND in the root
                                      # namespace with GOSSAMER_HOSTS set,
                                      # tear down; exits with its status;
                                      # --timeout S: COMMAND's process group
                                      # gets SIGTERM after S seconds, SIGKILL
                                      # 10 s later, and the exit status is
                                      # 124 (as timeout(1)); default: none;
                                      # --stats writes what the links saw
                                      # (JSON: bytes between islands, tbf
                                      # drops, TCP retransmissions);
                                      # --queue-ms: each tbf's queue in ms
                                      # at its rate (default 100);
                                      # --initcwnd N: TCP connections
                                      # start with a window of N segments
                                      # (default: the kernel's, 10)
    hosts.py exec HOST -- COMMAND...  # (inside COMMAND) run in host HOST
    hosts.py clean                    # remove what dead runs left behind

COMMAND sees GOSSAMER_HOSTS: a JSON list of {"name", "namespace",
"address", "island"} in host order (island by island, host r for rank r);
GOSSAMER_HOSTS_DELAY_MS; GOSSAMER_HOSTS_NETWORK, the job's `network:`
section for one rank per host in that order: the spec's own (JSON:
islands, inside_gbps, between_gbps, between_delay_ms, defaults filled in);
and GOSSAMER_HOSTS_PREFIX, the prefix of every namespace of this run
(``gsm<pid>-``), which ``hosts.py run`` also prints on stderr before it
makes them ("hosts: namespaces gsm<pid>-*"), so that a caller can tell its
own namespaces from another run's.
"""

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
from decimal import Decimal

import yaml

SKIP = 77
NET = "10.231"
MAX_ISLANDS = 200
MAX_HOSTS_PER_ISLAND = 250
GBPS_RANGE = (Decimal("0.000001"), Decimal(1000))  # 1 kbit/s .. 1 Tbit/s
DELAY_MAX_MS = 60000
# The network: section's keys and the job's defaults (gossamer-config --schema).
NETWORK_DEFAULTS = {"islands": [], "inside_gbps": 10, "between_gbps": 10, "between_delay_ms": 0}
WORLD_SIZE_DEFAULT = 4


class SpecError(Exception):
    """A spec file that is not as the module docstring describes."""


class Spec:
    """A loaded spec: world_size; network, the spec's network section with
    the job's defaults filled in (what GOSSAMER_HOSTS_NETWORK carries);
    islands, the host count of each island in host order; inside_rate and
    between_rate, the tc rates of a host's link and of the way into an
    island."""

    def __init__(self, world_size, network, islands, inside_rate, between_rate):
        self.world_size = world_size
        self.network = network
        self.islands = islands
        self.inside_rate = inside_rate
        self.between_rate = between_rate

    @property
    def delay_ms(self):
        return self.network["between_delay_ms"]


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def tc_rate(gbps_value):
    """The tc rate string of `gbps_value` Gbit/s, exact: the largest of gbit,
    mbit, kbit and bit that gives a whole number, else decimal bits
    (0.1 -> "100mbit", 1 -> "1gbit", 2.5 -> "2500mbit")."""
    d = Decimal(repr(gbps_value))  # the number as written: 0.1 is one tenth
    for unit, scale in (("gbit", 1), ("mbit", 10**3), ("kbit", 10**6), ("bit", 10**9)):
        v = d * scale
        if v == v.to_integral_value():
            return f"{int(v)}{unit}"
    return f"{format((d * 10**9).normalize(), 'f')}bit"


def load_spec(path):
    """Reads and checks a spec file (a job config; see the module docstring).
    Returns a Spec. Raises SpecError naming the file and the key."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: {e}") from e
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a mapping (a gossamer job config with world_size and network:)")
    world = doc.get("world_size", WORLD_SIZE_DEFAULT)
    if not is_int(world) or not 1 <= world <= MAX_ISLANDS * MAX_HOSTS_PER_ISLAND:
        raise SpecError(f"{path}: world_size: expected an integer in [1, {MAX_ISLANDS * MAX_HOSTS_PER_ISLAND}] "
                        f"(one host per rank), got {world!r}")
    net = doc.get("network")
    if net is None:
        net = {}
    if not isinstance(net, dict):
        raise SpecError(f"{path}: network: expected a mapping with keys {sorted(NETWORK_DEFAULTS)}, got {net!r}")
    unknown = set(net) - set(NETWORK_DEFAULTS)
    if unknown:
        raise SpecError(f"{path}: network: unknown key(s) {sorted(unknown, key=str)}; "
                        f"known: {sorted(NETWORK_DEFAULTS)}")
    net = {**NETWORK_DEFAULTS, **net}
    sizes = check_islands(path, world, net["islands"])
    rates = {}
    for key in ("inside_gbps", "between_gbps"):
        v = net[key]
        lo, hi = GBPS_RANGE
        if not is_number(v) or not math.isfinite(v) or not lo <= Decimal(repr(v)) <= hi:
            raise SpecError(f"{path}: network.{key}: expected a number of Gbit/s in [{lo}, {hi}] "
                            f"(1 kbit/s to 1 Tbit/s), got {v!r}")
        rates[key] = tc_rate(v)
    delay = net["between_delay_ms"]
    if not is_number(delay) or not math.isfinite(delay) or not 0 <= delay <= DELAY_MAX_MS:
        raise SpecError(f"{path}: network.between_delay_ms: expected a number in [0, {DELAY_MAX_MS}], "
                        f"got {delay!r}")
    return Spec(world, net, sizes, rates["inside_gbps"], rates["between_gbps"])


def check_islands(path, world, islands):
    """Checks network.islands against world_size and the host order (island
    by island, host r for rank r). Returns the host count of each island."""
    key = f"{path}: network.islands"
    ranks = f"world_size is {world}, so ranks are 0..{world - 1}"
    if not isinstance(islands, list):
        raise SpecError(f"{key}: expected a list of islands, each a list of ranks, got {islands!r}")
    if not islands:  # one island of every rank
        if world > MAX_HOSTS_PER_ISLAND:
            raise SpecError(f"{key}: one island (islands empty) holds at most {MAX_HOSTS_PER_ISLAND} "
                            f"hosts, but world_size is {world}: split the ranks into islands")
        return [world]
    if len(islands) > MAX_ISLANDS:
        raise SpecError(f"{key}: expected 1 to {MAX_ISLANDS} islands, got {len(islands)}")
    owner = {}
    for i, island in enumerate(islands):
        if not isinstance(island, list) or not 1 <= len(island) <= MAX_HOSTS_PER_ISLAND:
            raise SpecError(f"{key}[{i}]: expected a list of 1 to {MAX_HOSTS_PER_ISLAND} ranks, got {island!r}")
        for j, r in enumerate(island):
            if not is_int(r):
                raise SpecError(f"{key}[{i}][{j}]: expected a rank (an integer), got {r!r}")
            if not 0 <= r < world:
                raise SpecError(f"{key}[{i}][{j}]: rank {r} does not exist ({ranks})")
            if r in owner:
                raise SpecError(f"{key}[{i}][{j}]: rank {r} is already in network.islands[{owner[r]}] "
                                "(islands must not overlap)")
            owner[r] = i
    missing = [r for r in range(world) if r not in owner]
    if missing:
        raise SpecError(f"{key}: the islands must cover every rank exactly once ({ranks}), "
                        f"but rank {missing[0]} is in no island")
    first = 0
    for i, island in enumerate(islands):
        want = list(range(first, first + len(island)))
        if sorted(island) != want:
            raise SpecError(f"{key}[{i}]: hosts are numbered island by island (host r runs rank r), so "
                            f"island {i} must hold ranks {first}..{first + len(island) - 1}, got {island}")
        first += len(island)
    return [len(island) for island in islands]


def ip(*args, check=True):
    """Runs `ip ARGS`; raises CalledProcessError with its stderr on failure."""
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def tc(netns, *args):
    subprocess.run(["ip", "netns", "exec", netns, "tc", *args], check=True, capture_output=True,
                   text=True, timeout=30)


def tcp_counters(netns):
    """The TCP counters of namespace `netns`: {(table, name): value} from its
    /proc/net/snmp (table Tcp) and /proc/net/netstat (table TcpExt), each a
    header line of names and a line of values per table."""
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        r = subprocess.run(["ip", "netns", "exec", netns, "cat", path], check=True, capture_output=True,
                           text=True, timeout=30)
        lines = r.stdout.splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            table, _, names = names.partition(":")
            if table not in ("Tcp", "TcpExt") or not values.startswith(table + ":"):
                continue
            for name, value in zip(names.split(), values.partition(":")[2].split()):
                out[(table, name)] = int(value)
    return out


def namespaces():
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def clean():
    """Removes the namespaces of earlier runs whose process is gone."""
    removed = 0
    for ns in namespaces():
        m = re.match(r"^gsm(\d+)-", ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            ip("netns", "del", ns, check=False)
            removed += 1
    return removed


class Hosts:
    """Builds the namespaces of a spec; use as a context manager."""

    def __init__(self, spec, queue_ms=100, initcwnd=None):
        """`queue_ms`: each tbf's queue, in milliseconds at its rate (tc's latency); `initcwnd`: if set, the
        hosts' routes start each TCP connection's congestion window at that many segments and let its first
        advertised receive window be as large (initcwnd, initrwnd)."""
        self.islands = spec.islands
        self.inside_rate = spec.inside_rate
        self.between_rate = spec.between_rate
        self.queue = f"{queue_ms:g}ms"
        self.initcwnd = initcwnd
        self.prefix = f"gsm{os.getpid()}-"
        self.fabric = self.prefix + "fab"
        self.hosts = []

    def __enter__(self):
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()

    def _tbf(self, netns, dev):
        """The tbf of `dev` in `netns`: its counters (bytes, packets, drops, ...) from tc -s -j."""
        r = subprocess.run(["ip", "netns", "exec", netns, "tc", "-s", "-j", "qdisc", "show", "dev", dev],
                           check=True, capture_output=True, text=True, timeout=30)
        return [q for q in json.loads(r.stdout) if q.get("kind") == "tbf"]

    def link_stats(self):
        """What the links saw so far: the bytes (IP packets, Ethernet and IP
        headers included) that entered each island from the others (what each
        bridge's tbf sent), packets each tbf dropped (its queue full), by
        island link and by host, and the hosts' TCP segments retransmitted
        and retransmission timeouts (Tcp RetransSegs and TcpExt TCPTimeouts
        of /proc/net in each host's namespace). A dict: between_islands_bytes,
        into_island_bytes, island_link_drops, host_link_drops,
        tcp_retransmitted_segments, tcp_timeouts (lists by island or host,
        host order)."""
        crossed, island_drops = [], []
        for i in range(len(self.islands)):
            bridge = self._tbf(self.fabric, f"br{i}") if len(self.islands) > 1 else []
            crossed.append(sum(q.get("bytes", 0) for q in bridge))
            island_drops.append(sum(q.get("drops", 0) for q in bridge))
        host_drops, retrans, timeouts = [], [], []
        for h in self.hosts:
            host_drops.append(sum(q.get("drops", 0) for q in self._tbf(h["namespace"], "eth0")))
            counters = tcp_counters(h["namespace"])
            retrans.append(counters.get(("Tcp", "RetransSegs"), 0))
            timeouts.append(counters.get(("TcpExt", "TCPTimeouts"), 0))
        return {"between_islands_bytes": sum(crossed), "into_island_bytes": crossed,
                "island_link_drops": island_drops, "host_link_drops": host_drops,
                "tcp_retransmitted_segments": retrans, "tcp_timeouts": timeouts}

    def teardown(self):
        for ns in namespaces():
            if ns.startswith(self.prefix):
                ip("netns", "del", ns, check=False)

    def _build(self):
        ip("netns", "add", self.fabric)
        ip("-n", self.fabric, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", self.fabric, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
                       check=True, capture_output=True, timeout=30)
        rate = self.inside_rate
        for i, count in enumerate(self.islands):
            br = f"br{i}"
            ip("-n", self.fabric, "link", "add", "name", br, "type", "bridge")
            ip("-n", self.fabric, "addr", "add", f"{NET}.{i}.254/24", "dev", br)
            ip("-n", self.fabric, "link", "set", br, "up")
            # Routed packets into island i leave the fabric through br<i>.
            if len(self.islands) > 1:
                tc(self.fabric, "qdisc", "add", "dev", br, "root", "tbf", "rate", self.between_rate,
                   "burst", burst(self.between_rate), "latency", self.queue)
            for j in range(count):
                name = f"h{i}-{j}"
                ns = self.prefix + name
                port = f"p{i}x{j}"
                ip("netns", "add", ns)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "add", "name", "eth0", "type", "veth", "peer", "name", port, "netns", self.fabric)
                ip("-n", self.fabric, "link", "set", port, "master", br, "up")
                addr = f"{NET}.{i}.{j + 1}"
                ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "route", "add", "default", "via", f"{NET}.{i}.254")
                tc(ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", burst(rate),
                   "latency", self.queue)
                if self.initcwnd:
                    self._set_initial_windows(ns)
                self.hosts.append({"name": name, "namespace": ns, "address": addr, "island": i})


    def _set_initial_windows(self, ns):
        """Every route of host namespace `ns` (its island's subnet, its default) with initcwnd and initrwnd."""
        for route in ip("-n", ns, "route", "show").stdout.splitlines():
            ip("-n", ns, "route", "change", *route.split(), "initcwnd", str(self.initcwnd), "initrwnd",
               str(self.initcwnd))


def gbps(rate):
    """A tc rate in Gbit/s."""
    m = re.match(r"^([0-9.]+)([a-z]+)$", rate)
    value, unit = float(m.group(1)), m.group(2)
    bits = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
    byts = {"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
    return value * (bits.get(unit) or byts[unit]) / 1e9


def burst(rate):
    """A tbf bucket of about 1 ms at `rate` (at least 64 KiB), in bytes."""
    return str(max(65536, int(gbps(rate) * 1e9 / 8 / 1000)))


def can_make_namespaces():
    """(True, "") when a namespace with a veth can be made here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "needs root (CAP_NET_ADMIN) to make network namespaces"
    probe = f"gsm{os.getpid()}-probe"
    try:
        ip("netns", "add", probe)
        ip("-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb")
        ip("-n", probe, "link", "add", "name", "br", "type", "bridge")
        return True, ""
    except (OSError, subprocess.CalledProcessError) as e:
        why = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
        return False, f"cannot make a network namespace with a veth and a bridge: {why}"
    finally:
        ip("netns", "del", probe, check=False)


def run_options(argv):
    """`hosts.py run`'s arguments before its `--`: SPEC and the options; an exit status (2) if they are bad."""
    ap = argparse.ArgumentParser(prog="hosts.py run", add_help=False, allow_abbrev=False)
    ap.add_argument("spec")
    ap.add_argument("--stats", default=None)
    ap.add_argument("--queue-ms", type=float, default=100.0)
    ap.add_argument("--initcwnd", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=None)
    try:
        options = ap.parse_args(argv)
    except SystemExit:
        return 2
    if not 1 <= options.queue_ms <= 60000:
        print(f"hosts: --queue-ms {options.queue_ms:g}: a number of milliseconds in [1, 60000]", file=sys.stderr)
        return 2
    if options.initcwnd is not None and not 1 <= options.initcwnd <= 1000:
        print(f"hosts: --initcwnd {options.initcwnd}: a number of segments in [1, 1000]", file=sys.stderr)
        return 2
    if options.timeout is not None and not (math.isfinite(options.timeout) and options.timeout > 0):
        print(f"hosts: --timeout {options.timeout:g}: a positive number of seconds", file=sys.stderr)
        return 2
    return options


def kill_group(child, grace):
    """Ends `child`'s process group (`child` leads its own session): SIGTERM
    and up to `grace` seconds for `child` to end (none when `grace` is 0),
    then SIGKILL to whatever of the group is left; waits for `child` at most
    30 s more."""
    def signal_group(sig):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            pass

    if grace > 0:
        signal_group(signal.SIGTERM)
        try:
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    signal_group(signal.SIGKILL)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        print(f"hosts: process {child.pid} did not end 30 s after SIGKILL", file=sys.stderr)


def main(argv):
    if len(argv) >= 1 and argv[0] == "clean":
        print(f"hosts: removed {clean()} namespace(s) of runs that are gone")
        return 0
    if len(argv) >= 3 and argv[0] == "exec" and argv[2] == "--":
        hosts = json.loads(os.environ.get("GOSSAMER_HOSTS", "[]"))
        match = [h for h in hosts if h["name"] == argv[1]]
        if not match:
            print(f"hosts: no host '{argv[1]}' in GOSSAMER_HOSTS", file=sys.stderr)
            return 2
        os.execvp("ip", ["ip", "netns", "exec", match[0]["namespace"], *argv[3:]])
    if len(argv) < 4 or argv[0] != "run" or "--" not in argv[2:] or argv.index("--", 2) == len(argv) - 1:
        print(__doc__.split("Usage::")[1], file=sys.stderr)
        return 2
    cut = argv.index("--", 2)
    options = run_options(argv[1:cut])
    if isinstance(options, int):
        return options
    argv = ["run", options.spec, "--", *argv[cut + 1:]]
    stats = options.stats
    try:
        spec = load_spec(argv[1])
    except SpecError as e:
        print(f"hosts: {e}", file=sys.stderr)
        return 2
    ok, why = can_make_namespaces()
    if not ok:
        print(f"hosts: skipped: {why}", file=sys.stderr)
        return SKIP
    clean()

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # also when started in the background, where it is ignored
    child = None
    print(f"hosts: namespaces gsm{os.getpid()}-*", file=sys.stderr, flush=True)
    try:
        with Hosts(spec, options.queue_ms, options.initcwnd) as h:
            env = dict(os.environ, GOSSAMER_HOSTS=json.dumps(h.hosts),
                       GOSSAMER_HOSTS_DELAY_MS=str(spec.delay_ms),
                       GOSSAMER_HOSTS_NETWORK=json.dumps(spec.network),
                       GOSSAMER_HOSTS_PREFIX=h.prefix)
            child = subprocess.Popen(argv[3:], env=env, start_new_session=True)
            try:
                status = child.wait(timeout=options.timeout)
            except subprocess.TimeoutExpired:
                print(f"hosts: {argv[3]} still running after {options.timeout:g} s (--timeout): "
                      "ending its process group", file=sys.stderr, flush=True)
                kill_group(child, 10)
                return 124
            # What COMMAND left running in its process group (background
            # processes it did not wait for) does not outlive the hosts.
            kill_group(child, 0)
            if stats:
                with open(stats, "w", encoding="utf-8") as f:
                    json.dump(h.link_stats(), f)
            return status
    except KeyboardInterrupt:
        print("hosts: interrupted; removing the namespaces", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as e:
        print(f"hosts: {' '.join(e.cmd)} failed: {e.stderr.strip()}", file=sys.stderr)
        return 1
    finally:
        if child is not None and child.poll() is None:
            kill_group(child, 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

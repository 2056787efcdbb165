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

Shaping: each host's ``eth0`` egress carries a tbf at the island's ``rate``
(what the host can send at all); each bridge's egress in the fabric
namespace carries a tbf at ``between_islands.rate``, which only routed
packets pass: traffic from other islands into island i. Propagation delay
is not shaped here (this kernel has no netem): a job adds it itself
(``between_islands.delay_ms`` is passed on as GOSSAMER_HOSTS_DELAY_MS).

Only the namespaces and the 10.231.0.0/16 addresses created here are used,
never the machine's own interfaces; everything is removed on exit, after an
exception, SIGINT or SIGTERM. Where namespaces cannot be made (not root, no
CAP_NET_ADMIN, no veth or bridge support) the harness exits with status 77,
which ctest reports as skipped.

Spec (YAML)::

    islands:                 # one entry per island
      - hosts: 4             # hosts in the island (1..250)
        rate: 10gbit         # tc rate of each host's link (tc syntax)
      - hosts: 4
        rate: 10gbit
    between_islands:
      rate: 100mbit          # into each island from the others
      delay_ms: 20           # passed on to the job (GOSSAMER_HOSTS_DELAY_MS)

Usage::

    hosts.py run SPEC [--stats FILE] -- COMMAND...
                                      # set up, run COMMAND in the root
                                      # namespace with GOSSAMER_HOSTS set,
                                      # tear down; exits with its status;
                                      # --stats writes the bytes that
                                      # crossed between islands (JSON)
    hosts.py exec HOST -- COMMAND...  # (inside COMMAND) run in host HOST
    hosts.py clean                    # remove what dead runs left behind

COMMAND sees GOSSAMER_HOSTS: a JSON list of {"name", "namespace",
"address", "island"} in host order (island by island);
GOSSAMER_HOSTS_DELAY_MS; and GOSSAMER_HOSTS_NETWORK, the job's `network:`
section for one rank per host in that order (JSON: islands, inside_gbps,
between_gbps, between_delay_ms).
"""

import json
import os
import re
import signal
import subprocess
import sys

import yaml

SKIP = 77
NET = "10.231"
RATE = re.compile(r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$")


class SpecError(Exception):
    """A spec file that is not as the module docstring describes."""


def load_spec(path):
    """Reads and checks a spec file. Returns (islands, between) where islands
    is a list of (hosts, rate) and between a dict with rate and delay_ms.
    Raises SpecError naming the file and the key."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: {e}") from e
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a mapping with 'islands' and 'between_islands'")
    unknown = set(doc) - {"islands", "between_islands"}
    if unknown:
        raise SpecError(f"{path}: unknown key(s) {sorted(unknown)}")
    islands = doc.get("islands")
    if not isinstance(islands, list) or not 1 <= len(islands) <= 200:
        raise SpecError(f"{path}: 'islands' must be a list of 1 to 200 islands")
    out = []
    for i, isl in enumerate(islands):
        where = f"{path}: islands[{i}]"
        if not isinstance(isl, dict) or set(isl) - {"hosts", "rate"}:
            raise SpecError(f"{where}: expected keys 'hosts' and 'rate'")
        hosts = isl.get("hosts")
        if not isinstance(hosts, int) or isinstance(hosts, bool) or not 1 <= hosts <= 250:
            raise SpecError(f"{where}.hosts: expected an integer in [1, 250], got {hosts!r}")
        rate = str(isl.get("rate", "10gbit"))
        if not RATE.match(rate):
            raise SpecError(f"{where}.rate: '{rate}' is not a tc rate (e.g. 10gbit, 100mbit)")
        out.append((hosts, rate))
    between = doc.get("between_islands") or {}
    if not isinstance(between, dict) or set(between) - {"rate", "delay_ms"}:
        raise SpecError(f"{path}: between_islands: expected keys 'rate' and 'delay_ms'")
    rate = str(between.get("rate", "1gbit"))
    if not RATE.match(rate):
        raise SpecError(f"{path}: between_islands.rate: '{rate}' is not a tc rate")
    delay = between.get("delay_ms", 0)
    if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 10000:
        raise SpecError(f"{path}: between_islands.delay_ms: expected a number in [0, 10000]")
    return out, {"rate": rate, "delay_ms": delay}


def ip(*args, check=True):
    """Runs `ip ARGS`; raises CalledProcessError with its stderr on failure."""
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def tc(netns, *args):
    subprocess.run(["ip", "netns", "exec", netns, "tc", *args], check=True, capture_output=True,
                   text=True, timeout=30)


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

    def __init__(self, islands, between):
        self.islands = islands
        self.between = between
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

    def crossed_bytes(self):
        """Bytes (IP packets, headers included) that entered each island from
        the others so far: what each bridge's tbf sent. A list by island."""
        out = []
        for i in range(len(self.islands)):
            if len(self.islands) < 2:
                out.append(0)
                continue
            r = subprocess.run(["ip", "netns", "exec", self.fabric, "tc", "-s", "-j", "qdisc", "show", "dev",
                                f"br{i}"], check=True, capture_output=True, text=True, timeout=30)
            out.append(sum(q.get("bytes", 0) for q in json.loads(r.stdout) if q.get("kind") == "tbf"))
        return out

    def teardown(self):
        for ns in namespaces():
            if ns.startswith(self.prefix):
                ip("netns", "del", ns, check=False)

    def _build(self):
        ip("netns", "add", self.fabric)
        ip("-n", self.fabric, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", self.fabric, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
                       check=True, capture_output=True, timeout=30)
        for i, (count, rate) in enumerate(self.islands):
            br = f"br{i}"
            ip("-n", self.fabric, "link", "add", "name", br, "type", "bridge")
            ip("-n", self.fabric, "addr", "add", f"{NET}.{i}.254/24", "dev", br)
            ip("-n", self.fabric, "link", "set", br, "up")
            # Routed packets into island i leave the fabric through br<i>.
            if len(self.islands) > 1:
                tc(self.fabric, "qdisc", "add", "dev", br, "root", "tbf", "rate", self.between["rate"],
                   "burst", burst(self.between["rate"]), "latency", "100ms")
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
                   "latency", "100ms")
                self.hosts.append({"name": name, "namespace": ns, "address": addr, "island": i})


def gbps(rate):
    """A tc rate in Gbit/s."""
    m = re.match(r"^([0-9.]+)([a-z]+)$", rate)
    value, unit = float(m.group(1)), m.group(2)
    bits = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
    byts = {"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
    return value * (bits.get(unit) or byts[unit]) / 1e9


def network_section(hosts, islands, between):
    """The `network:` keys of a job with one rank per host, in host order."""
    groups = [[r for r, h in enumerate(hosts) if h["island"] == i] for i in range(len(islands))]
    return {"islands": groups, "inside_gbps": min(gbps(rate) for _, rate in islands),
            "between_gbps": gbps(between["rate"]), "between_delay_ms": between["delay_ms"]}


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
    stats = None
    if len(argv) >= 4 and argv[0] == "run" and argv[2] == "--stats":
        stats = argv[3]
        argv = argv[:2] + argv[4:]
    if len(argv) < 4 or argv[0] != "run" or argv[2] != "--":
        print(__doc__.split("Usage::")[1], file=sys.stderr)
        return 2
    try:
        islands, between = load_spec(argv[1])
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
    try:
        with Hosts(islands, between) as h:
            env = dict(os.environ, GOSSAMER_HOSTS=json.dumps(h.hosts),
                       GOSSAMER_HOSTS_DELAY_MS=str(between["delay_ms"]),
                       GOSSAMER_HOSTS_NETWORK=json.dumps(network_section(h.hosts, islands, between)))
            child = subprocess.Popen(argv[3:], env=env, start_new_session=True)
            status = child.wait()
            if stats:
                crossed = h.crossed_bytes()
                with open(stats, "w", encoding="utf-8") as f:
                    json.dump({"between_islands_bytes": sum(crossed), "into_island_bytes": crossed}, f)
            return status
    except KeyboardInterrupt:
        print("hosts: interrupted; removing the namespaces", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as e:
        print(f"hosts: {' '.join(e.cmd)} failed: {e.stderr.strip()}", file=sys.stderr)
        return 1
    finally:
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

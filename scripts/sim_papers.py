#!/usr/bin/python3
"""The seed papers' tables of synchronisation time, simulated beside the papers' formulas.

Paper 000 (Wang et al., 2D-TGA, Table 2, with Table 1's values): the
communication time of one allreduce of S = 3,231,961 float32 parameters
(12,927,844 bytes) by ring, hierarchical (L = 16 groups), 2D-torus and 2D-TGA
(L = 16 groups) allreduce, alpha = 0.7 us, B = 56 Gbit/s, at N workers
(--workers). The paper's formulas are its Table 2's bold (communication)
terms; where a term lacks its 1/B (LS/N and S/N in the hierarchical row) it
is read with it. Simulated: build/bench/sim-allreduce with the SDK's ring,
hierarchical, torus2d and tga2d on a flat cluster (each host's link at B,
latency alpha per message).

Paper 003 (Geng et al., HiPS, Table 3): the global synchronisation time
(GST) of W = 4 MiB of gradients on n^h servers in a BCube(n, h-1) and an
hD-torus, every link B = 10 Gbit/s each way, by HiPS (h stages, h parallel
streams, ring stages), mesh synchronisation (PSS/MS: one mesh stage over all
servers) and a ring (RS), for (n, h) in --hips-shapes. The platforms are
SimGrid files written here: the torus as SimGrid's TORUS cluster (dimension
order routes over neighbour links); BCube with one n-port switch per level
and digit pattern, each server with one link per level, and routes that
correct the address's digits from the highest level down through
intermediate servers (BCube's source routing). The PSS/MS formula on the
torus is the paper's lower bound.

Writes results/sim-papers.json (rows: paper, table, algorithm, workers,
topology, formula and simulated seconds, ratio, wall seconds) and prints
a table.

    scripts/sim-papers.sh [--workers 32,64,128,256,512] [--hips-shapes 4x2,8x3]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))

# Paper 000, Table 1.
ALPHA = 0.7e-6
B000 = 56e9 / 8  # bytes per second
S_ELEMENTS = 3231961
S = 4 * S_ELEMENTS  # bytes
L = 16

# Paper 003: our choice of W and B (the paper's table is symbolic).
POINT_TIMEOUT = 600  # seconds of wall time one simulation may take

W_ELEMENTS = 1 << 20
W = 4 * W_ELEMENTS
B003 = 10e9 / 8


def table2(algorithm, n):
    """Paper 000 Table 2's communication time of `algorithm` at n workers, seconds."""
    a, b, s, l = ALPHA, B000, S, L
    if algorithm == "ring":
        return 2 * (n - 1) * (a + s / (b * n))
    if algorithm == "hierarchical":
        return (2 * (n / l - 1) * (a + l * s / (n * b)) + (a + s / (n * b)) + 2 * (l - 1) * (a + s / (b * l)))
    if algorithm == "torus2d":
        r = math.sqrt(n)
        return 2 * (r - 1) * (a + s / (b * r)) + 2 * (r - 1) * (a + s / (b * n))
    if algorithm == "tga2d":
        q = math.sqrt(l)
        return (2 * (n / l - 1) * (a + l * s / (b * n)) + (a + s / b) + 2 * (q - 1) * (a + s / (b * q))
                + 2 * (q - 1) * (a + s / (b * l)))
    raise ValueError(algorithm)


def table3(topology, algorithm, n, h):
    """Paper 003 Table 3's GST, seconds."""
    share = (n ** h - 1) / n ** h
    factor = 2 if topology == "bcube" else 1
    if algorithm == "hips":
        return factor * share * W / (h * B003)
    if algorithm == "mesh":
        return factor * (n - 1) / n * W / B003
    if algorithm == "ring":
        return factor * share * W / B003
    raise ValueError(algorithm)


def torus_xml(n, h):
    dims = ",".join([str(n)] * h)
    return f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="torus" prefix="rank-" suffix="" radical="0-{n ** h - 1}" speed="1Gf" bw="{B003:.0f}Bps" lat="0"
           topology="TORUS" topo_parameters="{dims}" sharing_policy="SPLITDUPLEX"/>
</platform>
"""


def bcube_xml(n, h):
    """BCube(n, h-1): n^h servers (rank r: digits r in base n, digit 0 lowest),
    n^(h-1) switches per level; server r's level-i link joins the switch of
    the servers that differ from r in digit i only."""
    servers = n ** h
    lines = ["<?xml version='1.0'?>", '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
             '<platform version="4.1">', '  <zone id="bcube" routing="Full">']
    for r in range(servers):
        lines.append(f'    <host id="rank-{r}" speed="1Gf"/>')
    for r in range(servers):
        for i in range(h):
            lines.append(f'    <link id="l{r}-{i}" bandwidth="{B003:.0f}Bps" latency="0" sharing_policy="SPLITDUPLEX"/>')

    def digit(r, i):
        return (r // n ** i) % n

    for a in range(servers):
        for b in range(servers):
            if a == b:
                continue
            hops, cur = [], a
            for i in reversed(range(h)):
                d = digit(b, i)
                if digit(cur, i) != d:
                    nxt = cur + (d - digit(cur, i)) * n ** i
                    hops.append(f'<link_ctn id="l{cur}-{i}" direction="UP"/><link_ctn id="l{nxt}-{i}" direction="DOWN"/>')
                    cur = nxt
            lines.append(f'    <route src="rank-{a}" dst="rank-{b}" symmetrical="NO">{"".join(hops)}</route>')
    lines += ["  </zone>", "</platform>"]
    return "\n".join(lines) + "\n"


def simulate(args_list):
    """sim-allreduce's JSON, or {"error": its first line of stderr} when it fails."""
    exe = os.path.join(BUILD, "bench", "sim-allreduce")
    if not os.path.exists(exe):
        raise SystemExit(f"sim-papers: {exe} is not built")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        try:
            p = subprocess.run([exe, *args_list, "--json", out.name], capture_output=True, text=True,
                               timeout=POINT_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"sim-papers: sim-allreduce {' '.join(args_list)} took over {POINT_TIMEOUT} s", file=sys.stderr)
            return {"error": f"over {POINT_TIMEOUT} s of wall time", "simulated_seconds": None,
                    "wall_seconds": None}
        if p.returncode != 0:
            first = (p.stderr.strip().splitlines() or ["no message"])[0]
            print(f"sim-papers: sim-allreduce {' '.join(args_list)} failed: {first}", file=sys.stderr)
            return {"error": first, "simulated_seconds": None, "wall_seconds": None}
        with open(out.name) as f:
            return json.load(f)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="32,64,128,256,512")
    ap.add_argument("--hips-shapes", default="4x2,8x3", help="n x h of HiPS's table")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "sim-papers.json"))
    args = ap.parse_args(argv)
    rows = []
    print(f"{'paper':<6} {'topology':<10} {'algorithm':<13} {'workers':>7} {'paper s':>10} {'simulated s':>12} "
          f"{'ratio':>6} {'wall s':>7}", flush=True)

    def add(row, result):
        row["simulated_seconds"] = result["simulated_seconds"]
        row["wall_seconds"] = result["wall_seconds"]
        if "error" in result:
            row["error"] = result["error"]
            row["ratio"] = None
            print(f"{row['paper']:<6} {row['topology']:<10} {row['algorithm']:<13} {row['workers']:>7} "
                  f"{row['paper_seconds']:10.6f}  failed: {result['error']}", flush=True)
        else:
            row["ratio"] = row["simulated_seconds"] / row["paper_seconds"]
            print(f"{row['paper']:<6} {row['topology']:<10} {row['algorithm']:<13} {row['workers']:>7} "
                  f"{row['paper_seconds']:10.6f} {row['simulated_seconds']:12.6f} {row['ratio']:6.2f} "
                  f"{row['wall_seconds']:7.1f}", flush=True)
        rows.append(row)

    for n in (int(x) for x in args.workers.split(",")):
        for algorithm in ("ring", "hierarchical", "torus2d", "tga2d"):
            r = simulate(["--world-size", str(n), "--algorithm", algorithm, "--elements", str(S_ELEMENTS),
                          "--gbps", "56", "--latency-us", "0.7", "--groups", str(L)])
            add({"paper": "000", "table": "Table 2", "topology": "flat", "algorithm": algorithm, "workers": n,
                 "paper_seconds": table2(algorithm, n), "bytes": S}, r)
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.hips_shapes.split(","):
            n, h = (int(x) for x in shape.split("x"))
            servers = n ** h
            for topology, make in (("torus", torus_xml), ("bcube", bcube_xml)):
                path = os.path.join(tmp, f"{topology}-{n}-{h}.xml")
                with open(path, "w") as f:
                    f.write(make(n, h))
                for algorithm, flags in (("hips", ["--algorithm", "hips-ring", "--levels", ",".join([str(n)] * h)]),
                                         ("mesh", ["--algorithm", "hips-mesh", "--levels", str(servers)]),
                                         ("ring", ["--algorithm", "ring"])):
                    r = simulate(["--world-size", str(servers), "--elements", str(W_ELEMENTS), "--platform", path,
                                  *flags])
                    add({"paper": "003", "table": "Table 3", "topology": topology, "algorithm": algorithm,
                         "workers": servers, "n": n, "h": h, "paper_seconds": table3(topology, algorithm, n, h),
                         "bytes": W}, r)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"s_bytes": S, "alpha_seconds": ALPHA, "b000_bytes_per_second": B000, "groups": L,
                   "w_bytes": W, "b003_bytes_per_second": B003, "rows": rows}, f, indent=1)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

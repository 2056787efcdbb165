#!/usr/bin/python3
"""Footprint of libgossamer_c and of an agent, per build profile (run
through scripts/footprint.sh, which builds the profiles).

    footprint.py NAME=BUILD_DIR ...

For each profile: the size of libgossamer_c stripped of symbols (bytes),
and for zmq and socket, 2 ranks of bindings/c/examples/footprint.c on
loopback: rank 0's resident memory (KiB), threads and sockets before any
agent, with an idle agent, and after 200 steps of Crossover-SGD on 100,000
float32 parameters (the model's own 800 kB of params and grads included;
"added" is what the agent and training add beyond them). Prints a table and
writes results/footprint.json.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARAMETERS, STEPS = 100000, 200


def stripped_size(path):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "lib.so")
        subprocess.run(["strip", "--strip-all", "-o", out, path], check=True)
        return os.path.getsize(out)


def run_pair(program, transport):
    with tempfile.TemporaryDirectory(prefix="gossamer-footprint-") as tmp:
        procs = [subprocess.Popen([program, transport, str(r), "2", os.path.join(tmp, "rv"), str(PARAMETERS),
                                   str(STEPS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise SystemExit(f"{program} {transport} exited {p.returncode}: {err}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
    return next(o for o in outs if o["rank"] == 0)


def main():
    rows = []
    arch = platform.machine()
    for spec in sys.argv[1:]:
        name, build = spec.split("=", 1)
        lib = os.path.realpath(os.path.join(build, "bindings", "c", "libgossamer_c.so"))
        program = os.path.join(build, "bindings", "c", "footprint")
        size = stripped_size(lib)
        for transport in ("zmq", "socket"):
            m = run_pair(program, transport)
            model_kib = 2 * 4 * PARAMETERS / 1024
            rows.append({"profile": name, "arch": arch, "transport": transport, "library_bytes": size,
                         "base": m["base"], "idle": m["idle"], "training": m["training"],
                         "idle_added_kib": m["idle"]["rss_kib"] - m["base"]["rss_kib"],
                         "training_added_kib": m["training"]["rss_kib"] - m["base"]["rss_kib"] - model_kib,
                         "parameters": PARAMETERS, "steps": STEPS})
    print(f"{'profile':<9}{'arch':<8}{'transport':<10}{'lib MB':>8}{'idle RSS MB':>12}{'+agent MB':>10}"
          f"{'train RSS MB':>13}{'+train MB':>10}{'threads':>8}{'sockets':>8}")
    for r in rows:
        print(f"{r['profile']:<9}{r['arch']:<8}{r['transport']:<10}{r['library_bytes'] / 1e6:>8.2f}"
              f"{r['idle']['rss_kib'] / 1024:>12.1f}{r['idle_added_kib'] / 1024:>10.1f}"
              f"{r['training']['rss_kib'] / 1024:>13.1f}{r['training_added_kib'] / 1024:>10.1f}"
              f"{r['idle']['threads']:>8}{r['idle']['sockets']:>8}")
    out = os.path.join(ROOT, "results", "footprint.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f,
                  indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

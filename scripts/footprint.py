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

A profile built for another architecture (aarch64 on an x86-64 host, read
from the library's ELF header) is stripped with that architecture's strip
and run under qemu-ARCH-static. There VmRSS is the emulator's process, so
the memory reported is the program's own: the Rss, from the host's
/proc/self/smaps, of the mappings it sees in its emulated /proc/self/maps
("mapped_kib"; natively it equals VmRSS, and both are in the JSON). Threads
under qemu include the emulator's own.
"""
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARAMETERS, STEPS = 100000, 200
MODEL_KIB = 2 * 4 * PARAMETERS / 1024  # the model's float32 params and grads


HOST = platform.machine()
ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}


def elf_arch(path):
    """The architecture of an ELF file, from e_machine (bytes 18-19, little-endian)."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        raise SystemExit(f"{path}: not an ELF file")
    machine = int.from_bytes(header[18:20], "little")
    if machine not in ELF_MACHINES:
        raise SystemExit(f"{path}: ELF machine {machine:#x} is not one footprint.py knows")
    return ELF_MACHINES[machine]


def emulator(arch):
    """[] for the host's architecture, else the qemu user-mode emulator to run it with."""
    if arch == HOST:
        return []
    for name in (f"qemu-{arch}-static", f"qemu-{arch}"):
        path = shutil.which(name)
        if path:
            return [path]
    raise SystemExit(f"no qemu-{arch}-static to run the {arch} profile (scripts/deps.sh installs it)")


def stripped_size(path, arch):
    strip = "strip" if arch == HOST else f"{arch}-linux-gnu-strip"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "lib.so")
        subprocess.run([strip, "--strip-all", "-o", out, path], check=True)
        return os.path.getsize(out)


def run_pair(program, transport, prefix):
    with tempfile.TemporaryDirectory(prefix="gossamer-footprint-") as tmp:
        procs = [subprocess.Popen(prefix + [program, transport, str(r), "2", os.path.join(tmp, "rv"), str(PARAMETERS),
                                   str(STEPS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"{program} {transport} exited {p.returncode}: {err}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
    return next(o for o in outs if o["rank"] == 0)


def main():
    rows = []
    for spec in sys.argv[1:]:
        name, build = spec.split("=", 1)
        lib = os.path.realpath(os.path.join(build, "bindings", "c", "libgossamer_c.so"))
        program = os.path.join(build, "bindings", "c", "footprint")
        arch = elf_arch(lib)
        prefix = emulator(arch)
        key = "mapped_kib" if prefix else "rss_kib"
        size = stripped_size(lib, arch)
        for transport in ("zmq", "socket"):
            m = run_pair(program, transport, prefix)
            rows.append({"profile": name, "arch": arch, "emulated": bool(prefix), "memory": key,
                         "transport": transport, "library_bytes": size,
                         "base": m["base"], "idle": m["idle"], "training": m["training"],
                         "idle_kib": m["idle"][key],
                         "idle_added_kib": m["idle"][key] - m["base"][key],
                         "training_kib": m["training"][key],
                         "training_added_kib": m["training"][key] - m["base"][key] - MODEL_KIB,
                         "parameters": PARAMETERS, "steps": STEPS})
    print(f"{'profile':<9}{'arch':<8}{'transport':<10}{'lib MB':>8}{'idle RSS MiB':>13}{'+agent MiB':>11}"
          f"{'train RSS MiB':>14}{'+train MiB':>11}{'threads':>8}{'sockets':>8}")
    for r in rows:
        print(f"{r['profile']:<9}{r['arch']:<8}{r['transport']:<10}{r['library_bytes'] / 1e6:>8.2f}"
              f"{r['idle_kib'] / 1024:>12.1f}{r['idle_added_kib'] / 1024:>10.1f}"
              f"{r['training_kib'] / 1024:>13.1f}{r['training_added_kib'] / 1024:>10.1f}"
              f"{r['idle']['threads']:>8}{r['idle']['sockets']:>8}")
    out = os.path.join(ROOT, "results", "footprint.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f,
                  indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

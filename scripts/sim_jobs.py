"""The training jobs that the simulator's scripts run (validate_sim.py, sim_scale.py), and
what sim_mixing.py and sim_scale.py both ask of gossamer-topology.

Every training algorithm of gossamer-train, as an example config under
examples/configs/ and the --set overrides that make it one job. Every job names
its allreduce, so that the calibration of `auto` (timed differently on each
side of a comparison) cannot pick different algorithms.
"""
import math
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("GOSSAMER_BUILD_DIR", os.path.join(ROOT, "build"))

# name -> (example config, overrides)
JOBS = {
    "allreduce-ring": ("quickstart-allreduce", ["collectives.allreduce=ring"]),
    "allreduce-recursive_doubling": ("quickstart-allreduce", ["collectives.allreduce=recursive_doubling"]),
    "allreduce-rabenseifner": ("quickstart-allreduce", ["collectives.allreduce=rabenseifner"]),
    "allreduce-torus2d": ("quickstart-allreduce", ["collectives.allreduce=torus2d"]),
    "allreduce-tga2d": ("quickstart-allreduce", ["collectives.allreduce=tga2d"]),
    "allreduce-hierarchical": ("quickstart-allreduce", ["collectives.allreduce=hierarchical"]),
    "allreduce-hips": ("quickstart-allreduce", ["collectives.allreduce=hips"]),
    "crossover-sync": ("quickstart-crossover", ["algorithm.mode=sync", "collectives.allreduce=ring"]),
    "crossover-overlap": ("quickstart-crossover", ["algorithm.mode=overlap", "collectives.allreduce=ring"]),
    "crossover-async": ("quickstart-crossover", ["algorithm.mode=async", "collectives.allreduce=ring"]),
    "sgp": ("sgp", ["collectives.allreduce=ring"]),
    "hierarchical": ("hierarchical", ["collectives.allreduce=ring"]),
    "diloco": ("quickstart-diloco", ["collectives.allreduce=ring"]),
    "a2sgd": ("a2sgd-gossip", ["collectives.allreduce=ring"]),
}

# The jobs whose ranks hold one replicated model (AllReduce-SGD): they agree
# after every step, so a run of a step or two shows all there is.
REPLICATED = {name for name, (config, _) in JOBS.items() if config == "quickstart-allreduce"}


def start_distance(n):
    """gossamer-sim's starting consensus distance over n ranks (rank r at r): sqrt((n^2 - 1) / 12)."""
    return math.sqrt((n * n - 1) / 12)


def from_ramp_distances(topology, n, segments, steps, seed, sets=()):
    """gossamer-topology --from-ramp: the predicted consensus distance after each of `steps` steps of
    gossamer-sim's run (rank r starting at r), a list of `steps` floats; `sets` are --set KEY=VALUE overrides.

    Raises subprocess.CalledProcessError if the tool fails, SystemExit if it printed another number of steps.
    """
    cmd = [os.path.join(BUILD, "apps", "gossamer-topology"), "--world-size", str(n), "--steps", str(steps),
           "--segments", str(segments), "--seed", str(seed), "--topology", topology, "--from-ramp"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    d = [float(f[2]) for f in (line.split() for line in out.splitlines())
         if len(f) == 3 and f[0] == topology and f[1].isdigit()]
    if len(d) != steps:
        raise SystemExit(f"{len(d)} --from-ramp distances for {topology}, expected {steps}")
    return d

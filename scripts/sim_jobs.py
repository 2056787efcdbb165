"""The training jobs that the simulator's scripts run (validate_sim.py, sim_scale.py).

Every training algorithm of gossamer-train, as an example config under
examples/configs/ and the --set overrides that make it one job. Every job names
its allreduce, so that the calibration of `auto` (timed differently on each
side of a comparison) cannot pick different algorithms.
"""

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

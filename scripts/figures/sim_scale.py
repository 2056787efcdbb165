"""Every training algorithm simulated at scale, ranked by time to agreement (docs/scale.md).

scripts/sim-scale.sh (scripts/sim_scale.py): the jobs of scripts/sim_jobs.py
in gossamer-sim at 256 and 4,096 ranks in islands of 64 (10 Gbit/s and 20 us
inside, 1 Gbit/s and 20 ms between), 50 ms of compute per step, the ranks
starting apart, SimGrid's cross traffic off; 100 steps at 256 ranks, 16 at
4,096 (Crossover-SGD: 4 and 3 in its sync and overlap modes; A2SGD: 101 and
51, the first step and whole periods of its model exchange), one step of the
AllReduce-SGD jobs.
Simulated seconds per step, the simulated time until the consensus distance
is 1% of its start, the distance after 100 steps, the bytes that crossed
between islands per step and rank, and the simulation's wall time and
memory.
"""
COMMAND = ["scripts/sim-scale.sh", "--world-sizes", "256,4096", "--steps", "16", "--steps-at", "256=100",
           "--replicated-steps", "1", "--allreduce", "rabenseifner", "--cfg", "network/crosstraffic:0",
           "--timeout", "900", "--steps-for", "crossover-sync@4096=4", "--steps-for", "crossover-overlap@4096=3",
           "--steps-for", "a2sgd@256=101",
           "--steps-for", "a2sgd@4096=51"]
JSON = "results/sim-scale.json"


def _to_target(r):
    """Simulated seconds to the target, measured or predicted (None: neither)."""
    if r.get("seconds_to_target") is not None:
        return r["seconds_to_target"]
    return r.get("predicted_seconds_to_target")


def _step(r):
    """Simulated seconds per step until every rank had finished its last step."""
    return r["step_end_seconds"][-1] / len(r["step_end_seconds"]) if "step_end_seconds" in r else 0


def _key(r):
    return (r["world_size"], r["timed_out"], _to_target(r) is None, _to_target(r) or 0, _step(r))


def _after_100(r):
    """The consensus distance after 100 steps as a fraction of the start; a replicated model's is 0 after every
    step run; '-' where fewer steps ran."""
    if r["replicated_model"] and not any(r["consensus_distance"]):
        return "0 (one model)"
    d = r.get("consensus_distance_after_100_steps")
    return "-" if d is None else f"{d / r['initial_distance']:.2g}"


def render(data):
    """One row per world size and job, the soonest to agree first."""
    target = data["arguments"]["target"]
    lines = [f"| ranks | islands | job | algorithm | s/step (simulated) | s to {target:.0%} of the start "
             "(steps) | distance after 100 steps | MB between islands per step and rank | wall s | peak GB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(data["rows"], key=_key):
        if r["timed_out"]:
            lines.append(f"| {r['world_size']} | {r['islands']} | {r['job']} | - | - | - | - | - "
                         f"| killed at {r['wall_seconds']:.0f} | - |")
            continue
        per = r["bytes_between_islands"] / r["steps"] / r["world_size"] / 1e6
        if r["seconds_to_target"] is None and r.get("predicted_seconds_to_target") is not None:
            to = (f"{r['predicted_seconds_to_target']:.3f} ({r['predicted_steps_to_target']}, predicted; "
                  f"{r['steps']} simulated)")
        elif r["seconds_to_target"] is None:
            left = r["consensus_distance"][-1] / r["initial_distance"]
            to = f"not in {r['steps']} (distance {left:.2g} of the start)"
        else:
            to = f"{r['seconds_to_target']:.3f} ({r['steps_to_target']})"
        lines.append(f"| {r['world_size']} | {r['islands']} | {r['job']} | {r['algorithm']} | "
                     f"{_step(r):.3f} | {to} | {_after_100(r)} | {per:.3f} | {r['wall_seconds']:.0f} "
                     f"| {r['peak_resident_bytes'] / 1e9:.1f} |")
    return "\n".join(lines) + "\n"

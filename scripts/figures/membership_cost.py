"""Training speed with the membership service on and off (docs/operations.md).

8 gossamer-train processes over zmq on loopback, the Fashion-MNIST MLP, 3
epochs, medians of 3 interleaved runs per algorithm (scripts/membership_cost.py).
"""
COMMAND = ["scripts/membership-cost.sh", "--reps", "3", "--epochs", "3"]
JSON = "results/membership-cost.json"
NAMES = {"crossover": "Crossover-SGD", "sgp": "SGP", "allreduce": "AllReduce-SGD"}


def render(data):
    """The table: algorithm, steps/s with membership off and on, their ratio."""
    lines = ["| algorithm | off, steps/s | on, steps/s | on/off |", "|---|---|---|---|"]
    for row in data["rows"]:
        lines.append(f"| {NAMES.get(row['algorithm'], row['algorithm'])} | {row['steps_per_second_off']:.1f} | "
                     f"{row['steps_per_second_on']:.1f} | {row['ratio']:.2f} |")
    return "\n".join(lines) + "\n"

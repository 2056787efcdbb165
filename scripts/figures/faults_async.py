"""SGP in async mode against sync SGP under faults (docs/operations.md).

8 gossamer-train processes over zmq on loopback, 20 epochs of the
Fashion-MNIST MLP, fault-free, with a 10x straggler (rank 3 sleeps 9 step
times after each step) and with a kill -9 of rank 3 at 30% (scripts/faults.py):
survivors, accuracy of the survivors' average model, the lowest and highest
push-sum weight of any rank after any step, and the survivors' steps per
second outside the epochs' flushes.
"""
COMMAND = ["scripts/faults.sh", "--algorithms", "sgp,sgp-async", "--scenarios", "none,straggler,kill-1",
           "--epochs", "20"]
JSON = "results/faults.json"
MODES = {"sgp": "sync", "sgp-async": "async"}


def weights(row):
    low, high = row["push_sum_weight_min"], row["push_sum_weight_max"]
    if low is None or high is None:
        return "-"
    return f"{low:g}" if low == high else f"{low:.2f} - {high:.2f}"


def render(data):
    """The table: one row per mode (sync, async) and scenario."""
    lines = ["| mode | scenario | survivors | all finished | accuracy % | weights | steps/s |",
             "|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        accuracy = "-" if row["test_accuracy"] is None else f"{100 * row['test_accuracy']:.2f}"
        rate = "-" if row["steps_per_second"] is None else f"{row['steps_per_second']:.1f}"
        lines.append(f"| {MODES.get(row['algorithm'], row['algorithm'])} | {row['scenario']} | {row['survivors']} | "
                     f"{'yes' if row['survivors_finished'] else 'no'} | {accuracy} | {weights(row)} | {rate} |")
    return "\n".join(lines) + "\n"

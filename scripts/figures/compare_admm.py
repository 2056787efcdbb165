"""Consensus ADMM over ring, 2D-TGA and hierarchical allreduce (docs/admm.md).

gossamer-admm on the SpamAssassin logistic regression, 8 processes over zmq
on loopback, one run per allreduce in each of 3 interleaved rounds
(scripts/compare_admm.py): iterations to f_rerr <= 1e-3, updating and
synchronisation wait seconds per iteration (median over the rounds, and each
round's), and the test accuracy of the consensus model against the central one.
"""
COMMAND = ["scripts/compare-admm.sh"]
JSON = "results/compare-admm.json"


def seconds(row, key):
    rounds = ", ".join(f"{v:.3f}" for v in row[key + "_rounds"])
    return f"{row[key]:.3f} ({rounds})"


def render(data):
    """The table: per allreduce, iterations to 1e-3, both times per iteration, both accuracies."""
    lines = ["| allreduce | ranks | iterations to f_rerr <= 1e-3 | updating s / iteration | sync wait s / iteration "
             "| test accuracy | central test accuracy |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in data["rows"]:
        iterations = "-" if r["iterations_to_1e-3"] is None else r["iterations_to_1e-3"]
        lines.append(f"| {r['allreduce_algorithm']} | {r['world_size']} | {iterations} | "
                     f"{seconds(r, 'update_seconds_per_iteration')} | {seconds(r, 'sync_wait_seconds_per_iteration')} | "
                     f"{100 * r['test_accuracy']:.2f}% | {100 * r['central_test_accuracy']:.2f}% |")
    return "\n".join(lines) + "\n"

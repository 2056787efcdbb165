"""The main job, scripts/quickstart.sh (README.md, docs/getting-started.md).

4 gossamer-train processes over zmq on loopback train the Fashion-MNIST MLP
for 3 epochs, first with Crossover-SGD (examples/configs/quickstart-crossover.yaml),
then with AllReduce-SGD (quickstart-allreduce.yaml); results/quickstart.json
holds both runs' summaries, in that order. The block shows what the job
prints: Crossover-SGD's last epoch line and summing-up line (as
gossamer-train formats them), then the script's comparison of the two
accuracies.
"""
import math

COMMAND = ["scripts/quickstart.sh"]
JSON = "results/quickstart.json"


def epoch_line(summary):
    """gossamer-train's line for the summary's last epoch (apps/train/main.cpp)."""
    h = summary["history"][-1]
    return (f"epoch {h['epoch']}/{summary['epochs']}  loss {h['train_loss']:.4f}  "
            f"test acc (avg model) {100 * h['test_accuracy']:.2f}%  (rank 0) {100 * h['test_accuracy_rank0']:.2f}%  "
            f"consensus {h['consensus_distance']:.3e}  sent/peer {h['bytes_sent_per_peer'] / 1e6:.1f} MB  "
            f"{h['seconds']:.1f} s")


def done_line(summary):
    """gossamer-train's summing-up line, the run directory relative to the repository."""
    run_dir = summary["run_dir"]
    if "results/runs/" in run_dir:
        run_dir = run_dir[run_dir.index("results/runs/"):]
    return (f"done: {summary['algorithm']}, {summary['world_size']} ranks, {summary['epochs']} epochs in "
            f"{summary['wall_seconds']:.1f} s: test accuracy {100 * summary['test_accuracy']:.2f}% (average model), "
            f"consensus {summary['consensus_distance']:.2e}, {summary['bytes_sent_per_peer'] / 1e6:.1f} MB sent per "
            f"peer; summary: {run_dir}/summary.json")


def percent(accuracy):
    """An accuracy as quickstart.sh's jq prints it: percent rounded to 2 decimals, no trailing zeros."""
    value = math.floor(accuracy * 100 * 100 + 0.5) / 100
    return str(int(value)) if value == int(value) else repr(value)


def render(data):
    """The job's output: Crossover-SGD's last two lines, then the two accuracies side by side."""
    crossover, allreduce = data
    return ("```\n" + epoch_line(crossover) + "\n" + done_line(crossover) + "\n...\n"
            f"Crossover-SGD {percent(crossover['test_accuracy'])}% vs AllReduce-SGD "
            f"{percent(allreduce['test_accuracy'])}% test accuracy (average model)\n```\n")

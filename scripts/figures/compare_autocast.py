"""The Python CNN example in float32 and under torch.autocast bfloat16 (docs/python.md).

examples/python/train_fashion_mnist.py, 4 ranks over zmq on loopback,
Crossover-SGD with Adam, 3 epochs on all 60,000 training images (the example's defaults), the same seed,
one run per precision (scripts/compare_autocast.py): test accuracy of the
average model and wall seconds, with the accuracy gap to float32.
"""
import statistics

COMMAND = ["scripts/compare-autocast.sh"]
JSON = "results/compare-autocast.json"
LABELS = {"none": "float32", "bfloat16": "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`"}


def render(data):
    """One row per precision: median accuracy and wall seconds over its runs, and the gap."""
    med = {p: statistics.median(r["test_accuracy"] for r in data if r["autocast"] == p) for p in LABELS}
    lines = ["| precision | runs | test acc (avg model) | vs float32 | wall s |", "| --- | --- | --- | --- | --- |"]
    for p, label in LABELS.items():
        rows = [r for r in data if r["autocast"] == p]
        lines.append(f"| {label} | {len(rows)} | {100 * med[p]:.2f}% | {100 * (med[p] - med['none']):+.2f} "
                     f"| {statistics.median(r['wall_seconds'] for r in rows):.1f} |")
    return "\n".join(lines) + "\n"

"""DistributedDataParallel on gloo and on Gossamer's backend "gossamer"
(docs/python.md): the Python example's CNN on the 60,000 Fashion-MNIST
training images, one epoch, tested on the 10,000 test images, 4 ranks on loopback, the same seed, 3 interleaved rounds
(bench/bench_ddp.py): median test accuracy and milliseconds per step, the
step-time ratio and the accuracy difference.
"""
COMMAND = ["bench/bench_ddp.py"]
JSON = "results/bench-ddp.json"


def render(data):
    """One row per backend, then the ratio and the difference."""
    lines = ["| backend | test accuracy | ms per step |", "| --- | --- | --- |"]
    for b in ("gloo", "gossamer"):
        lines.append(f"| {b} | {100 * data[b]['test_accuracy']:.2f}% | {1000 * data[b]['step_seconds']:.1f} |")
    lines.append("")
    lines.append(f"Step time gossamer / gloo: {data['step_ratio']:.2f}; accuracy difference "
                 f"{data['accuracy_difference_points']:+.2f} points ({data['world_size']} ranks, "
                 f"{data['train_images']:,} training images, {data['epochs']} epoch(s)).")
    return "\n".join(lines) + "\n"

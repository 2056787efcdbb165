"""DiLoCo against AllReduce-SGD on the quickstart job, and DiLoCo's variants (docs/algorithms.md).

quickstart-diloco.yaml (H = 50) and quickstart-allreduce.yaml, 4 processes over
zmq on loopback, 3 epochs, 3 interleaved rounds (scripts/compare_diloco.py);
then each variant once, `--set algorithm.KEY=VALUE` on quickstart-diloco.yaml.
"""
import statistics

COMMAND = ["scripts/compare-diloco.sh"]
JSON = "results/compare-diloco.json"


def _joined(values, fmt):
    return ", ".join(format(v, fmt) for v in values)


def render(data):
    """Per config: the accuracy of the first round, and every round's wall seconds,
    seconds per epoch and elapsed seconds, with the bytes per step."""
    lines = ["| config | test acc (avg model) | wall s (summary) | s/epoch | elapsed s (data loading included) "
             "| sent/peer/step |", "| --- | --- | --- | --- | --- | --- |"]
    configs = list(dict.fromkeys(r["config"] for r in data["runs"]))
    for c in configs:
        rows = [r for r in data["runs"] if r["config"] == c]
        accs = sorted({f"{100 * r['test_accuracy']:.2f}%" for r in rows})
        lines.append(f"| `{c}` | {', '.join(accs)} | {_joined([r['wall_seconds'] for r in rows], '.2f')} "
                     f"| {_joined([r['seconds_per_epoch'] for r in rows], '.2f')} "
                     f"| {_joined([r['elapsed_seconds'] for r in rows], '.2f')} "
                     f"| {statistics.median(r['bytes_per_step'] for r in rows):,.0f} B |")
    return "\n".join(lines) + "\n"


def render_variants(data):
    """One row per variant: accuracy, bytes per step, consensus distance after epoch 2."""
    lines = ["| variant | test acc | sent/peer/step | consensus after epoch 2 |", "| --- | --- | --- | --- |"]
    for v in data["variants"]:
        c = v["consensus_after_epoch_2"]
        lines.append(f"| {v['variant']} | {100 * v['test_accuracy']:.2f}% | {v['bytes_per_step']:,.0f} B "
                     f"| {'-' if c is None else format(c, '.2g')} |")
    return "\n".join(lines) + "\n"

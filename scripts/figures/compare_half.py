"""The quickstart job in float32 against compression.kind bf16 and fp16 (docs/compression.md).

quickstart-allreduce.yaml (16-bit gradients) and quickstart-crossover.yaml
(16-bit model segments) at 4 and 8 peers over zmq on loopback, with
compression.kind none, bf16 and fp16, one after the other
(scripts/compare_half.py): test accuracy of the average model, its gap to
float32, payload bytes per peer per step and their ratio, seconds per epoch.
"""
COMMAND = ["scripts/compare-half.sh"]
JSON = "results/compare-half.json"


def render(data):
    """One row per algorithm, world size and precision on the wire."""
    base = {(r.get("algorithm", "allreduce_sgd"), r["world_size"]): r for r in data if r["compression"] == "none"}
    lines = ["| algorithm | peers | on the wire | test acc | vs float32 | bytes/step | ratio | s/epoch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data:
        algorithm = r.get("algorithm", "allreduce_sgd")
        b = base[(algorithm, r["world_size"])]
        label = "float32" if r["compression"] == "none" else f"`{r['compression']}`"
        lines.append(f"| {algorithm} | {r['world_size']} | {label} | {100 * r['test_accuracy']:.2f}% "
                     f"| {100 * (r['test_accuracy'] - b['test_accuracy']):+.2f} | {r['bytes_per_step']:,.0f} "
                     f"| {r['bytes_per_step'] / b['bytes_per_step']:.3f} | {r['seconds_per_epoch']:.2f} |")
    return "\n".join(lines) + "\n"

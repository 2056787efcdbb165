"""Communication hidden behind backward (docs/python.md).

gossamer.torch.DistributedOptimizer under AllReduce-SGD with its bucketed
gradient allreduces started during backward (overlap=True) and after it
(overlap=False), and DDP on torch's gloo backend, 2 ranks on two test hosts
joined by a 1 Gbit/s link, 3 interleaved rounds of 50 steps
(bench/bench_overlap.py; needs root for the namespaces): median seconds per
step, the ratios, the allreduce's share of a step without overlap, and
whether the two gossamer runs ended with the same bits.
"""
COMMAND = ["bench/bench_overlap.py"]
JSON = "results/bench-overlap.json"


def render(data):
    """One row per model."""
    lines = ["| model | parameters | no overlap | overlap | ratio | DDP on gloo | allreduce share | same bits |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data:
        lines.append(f"| {r['model']} | {r['parameters']:,} | {r['step_seconds_no_overlap']:.3f} s "
                     f"| {r['step_seconds_overlap']:.3f} s | {r['overlap_ratio']:.2f} "
                     f"| {r['step_seconds_ddp_gloo']:.3f} s | {100 * r['allreduce_fraction']:.0f}% "
                     f"| {'yes' if r['bit_identical'] else 'no'} |")
    return "\n".join(lines) + "\n"

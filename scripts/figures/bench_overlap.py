"""Communication hidden behind backward (docs/python.md).

gossamer.torch.DistributedOptimizer under AllReduce-SGD with its bucketed
gradient allreduces started during backward (overlap=True) and after it
(overlap=False), and DDP on torch's gloo backend and on Gossamer's
("gossamer"), 2 ranks on two test hosts
joined by a 1 Gbit/s link, 4 MiB buckets (DDP's bucket_cap_mb likewise),
3 interleaved rounds of 50 steps
(bench/bench_overlap.py; needs root for the namespaces): median seconds per
step, the ratios, the share of a step without overlap spent in opt.step()
(the allreduces and the SGD update after them), and
whether the two gossamer runs ended with the same bits.
"""
COMMAND = ["bench/bench_overlap.py", "--bucket-mib", "4"]
JSON = "results/bench-overlap.json"


def render(data):
    """One row per model."""
    lines = ["| model | parameters | bucket | no overlap | overlap | ratio | DDP on gloo | DDP on gossamer "
             "| gossamer / gloo | allreduce share | same bits |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data:
        gossamer = r.get("step_seconds_ddp_gossamer")  # absent in runs from before the backend existed
        ddp = (f"{gossamer:.3f} s | {r['ddp_gossamer_to_gloo']:.2f}" if gossamer is not None else "not run | -")
        bucket = f"{r['bucket_bytes'] / 2**20:g} MiB" if "bucket_bytes" in r else "25 MiB"
        lines.append(f"| {r['model']} | {r['parameters']:,} | {bucket} | {r['step_seconds_no_overlap']:.3f} s "
                     f"| {r['step_seconds_overlap']:.3f} s | {r['overlap_ratio']:.2f} "
                     f"| {r['step_seconds_ddp_gloo']:.3f} s | {ddp} | {100 * r['allreduce_fraction']:.0f}% "
                     f"| {'yes' if r['bit_identical'] else 'no'} |")
    return "\n".join(lines) + "\n"

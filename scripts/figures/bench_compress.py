"""Encode + decode throughput of each gradient compressor against memcpy (docs/compression.md).

One thread, interleaved repetitions, medians (bench/compress through
scripts/bench-compress.sh): GB/s of input, memcpy's GB/s in the same run, their
ratio, payload bytes per worker per step, encode and decode milliseconds, at
1M, 16M and 64M floats.
"""
COMMAND = ["scripts/bench-compress.sh"]
JSON = "results/bench-compress.json"


def render(data):
    """The table as the benchmark prints it, one row per compressor and size."""
    lines = [f"{'compressor':<18}{'floats':>10}{'GB/s':>10}{'memcpy GB/s':>13}{'ratio':>8}{'bytes/step':>13}"
             f"{'encode ms':>12}{'decode ms':>12}"]
    for r in data:
        lines.append(f"{r['compressor']:<18}{r['floats']:>10}{r['gbps']:>10.2f}{r['memcpy_gbps']:>13.2f}"
                     f"{r['ratio']:>8.2f}{r['bytes_per_step']:>13.0f}{1e3 * r['encode_seconds']:>12.2f}"
                     f"{1e3 * r['decode_seconds']:>12.2f}")
    return "```\n" + "\n".join(lines) + "\n```\n"

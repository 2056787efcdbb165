"""GB/s of the frame checksum (CRC-32C), with and without a copy, next to memcpy (docs/transports.md).

One thread, medians of 5 interleaved rounds (bench/checksum.cpp): the SDK's
crc32c (ISA-L's crc32_iscsi when built with it, as the JSON's checksum_by
says), copyAndCrc32c in 16 KiB blocks, and memcpy, from 4 KiB to 64 MiB.
"""
COMMAND = ["build/bench/checksum", "--json", "results/bench-checksum.json"]
JSON = "results/bench-checksum.json"


def _size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def render(data):
    """One row per buffer size: GB/s (1e9 bytes/s) of each kind."""
    rows = {}
    for r in data["rows"]:
        rows.setdefault(r["bytes"], {})[r["kind"]] = r["gb_per_s"]
    lines = [f"Checksum by {data['checksum_by']}.", "",
             "| bytes | CRC-32C | copy + CRC-32C (16 KiB blocks) | memcpy |", "|---|---|---|---|"]
    for n in sorted(rows):
        k = rows[n]
        lines.append(f"| {_size(n)} | {k['crc32c']:.1f} GB/s | {k['copy+crc32c']:.1f} GB/s | {k['memcpy']:.1f} GB/s |")
    return "\n".join(lines) + "\n"

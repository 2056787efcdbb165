"""What security (CURVE on the zmq transport) costs (docs/security.md).

Three cases over zmq tcp on loopback, each without and with CURVE, interleaved,
3 times, medians (scripts/bench_security.py): the one-way time of a 4 MiB
message (bench/p2p), a 4 KiB ring allreduce on 4 ranks (bench/allreduce) and the
wall time of the quickstart job (gossamer-train, 4 peers).
"""
import math

COMMAND = ["scripts/bench-security.sh"]
JSON = "results/bench-security.json"


def label(case, data):
    return {
        "exchange-4MiB": "4 MiB message, zmq tcp, one way",
        "allreduce-4KiB": "4 KiB ring allreduce, 4 ranks, zmq tcp",
        "quickstart": f"quickstart job (4 peers, {data['epochs']} epochs), wall time",
    }.get(case, case)


def seconds(s):
    """Three significant digits, in ms below a second."""
    value, unit = (s * 1e3, "ms") if s < 1 else (s, "s")
    decimals = max(0, 2 - math.floor(math.log10(value))) if value > 0 else 2
    return f"{value:.{decimals}f} {unit}"


def render(data):
    """The table: per case the median time without and with CURVE, and their ratio."""
    lines = ["| case | plain | CURVE | CURVE / plain |", "|---|---|---|---|"]
    for row in data["rows"]:
        lines.append(f"| {label(row['case'], data)} | {seconds(row['plain_seconds'])} | "
                     f"{seconds(row['curve_seconds'])} | {row['ratio']:.2f} |")
    return "\n".join(lines) + "\n"

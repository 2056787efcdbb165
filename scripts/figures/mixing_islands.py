"""Expected mixing of the fair and the bandwidth-aware roulette on two islands
(docs/mixing.md).

Computed, not timed: gossamer-topology on 8 ranks in two islands of 4
(10 Gbit/s inside, 0.1 Gbit/s between), 4 segments of the MLP, seed 42, E[W]
estimated over 20000 rounds (scripts/mixing_islands.py): the products' slem,
sigma2 and imbalance over 12 steps, and per bandwidth exponent the spectral
gap of E[W], the share of segments that cross between the islands and the
modelled time a rank takes to send its segments.
"""
import shlex

COMMAND = ["scripts/mixing-islands.sh"]
JSON = "results/mixing-islands.json"
WIDTH = 105


def command_lines(arguments):
    """`$ gossamer-topology ARGS`, an option and its value kept together, wrapped with backslashes."""
    pairs = [shlex.join(arguments[i:i + 2]) for i in range(0, len(arguments), 2)]
    lines, line = [], "$ gossamer-topology"
    for pair in pairs:
        if len(line) + 1 + len(pair) > WIDTH:
            lines.append(line + " \\")
            line = "   "
        line += " " + pair
    return lines + [line]


def render_output(data):
    """gossamer-topology's command line and output for 12 steps, as a code block."""
    return "```\n" + "\n".join(command_lines(data["arguments"])) + "\n" + data["output"].rstrip("\n") + "\n```\n"


def milliseconds(seconds):
    ms = 1e3 * seconds
    return f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2g} ms"


def render(data):
    """The table: per exponent, the gap of E[W], the share of segments across,
    segments across per rank and step, and the modelled send time per step
    (the fair roulette's estimated, the bandwidth roulette's exact)."""
    lines = ["| topology | exponent | gap of E[W] | segments across | across per rank and step "
             "| modelled send time per step |",
             "|---|---|---|---|---|---|"]
    for row in data["rows"]:
        exact = row["exact_gap"] is not None
        gap = f"{row['exact_gap']:.4g}" if exact else f"{row['gap']:.3g} (est.)"
        cross = row["exact_cross"] if row["exact_cross"] is not None else row["cross"]
        share = f"{100 * cross:.4g}%" + ("" if row["exact_cross"] is not None else " (est.)")
        exponent = row["bandwidth_exponent"]
        exponent = " " if exponent is None else f" {exponent:g}{' (default)' if exponent == 1 else ''} "
        lines.append(f"| `{row['topology']}` |{exponent}| {gap} | {share} | {cross * row['messages_per_rank']:.3g} | "
                     f"{milliseconds(row['modelled_send_seconds'])} |")
    return "\n".join(lines) + "\n"

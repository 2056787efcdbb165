"""The quickstart job on test hosts in two islands (docs/mixing.md, docs/hosts.md).

Crossover-SGD (4 segments), the Fashion-MNIST MLP, 3 epochs, 8 ranks on 8
network-namespace hosts in two islands of 4 (10 Gbit/s inside, 100 Mbit/s
and 20 ms between, shaped with tc), run by scripts/islands-training.sh with
the fair roulette (with and without the 20 ms) and the bandwidth roulette at
exponents 0.5 and 1: seconds per epoch, wall time, accuracy of the average
model after each epoch, consensus distance, bytes sent per peer. Needs root
(the namespaces).
"""
COMMAND = ["scripts/islands-training.sh"]
JSON = "results/islands-training.json"


def short_e(value):
    """1 significant decimal in scientific notation, the exponent without padding: 3.2e-3."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def epoch_seconds(summary):
    seconds = [h["seconds"] for h in summary["history"]]
    return f"{min(seconds):.1f}-{max(seconds):.1f}"


def render(data):
    """The table of docs/mixing.md: one row per topology and exponent, with the 20 ms."""
    epochs = data["rows"][0]["summary"]["epochs"]
    lines = [f"| topology | exponent | s per epoch | wall s ({epochs} epochs) | test acc (avg model) after epochs "
             f"{'/'.join(str(e) for e in range(1, epochs + 1))} | consensus after {epochs} |",
             "|---|---|---|---|---|---|"]
    for row in data["rows"]:
        if not row["island_delay"]:
            continue
        s = row["summary"]
        exponent = " " if row["bandwidth_exponent"] is None else f" {row['bandwidth_exponent']:g} "
        accuracies = " / ".join(f"{100 * h['test_accuracy']:.2f}" for h in s["history"])
        lines.append(f"| `{row['topology']}` |{exponent}| {epoch_seconds(s)} | {s['wall_seconds']:.1f} | "
                     f"{accuracies}% | {short_e(s['consensus_distance'])} |")
    return "\n".join(lines) + "\n"


def render_hosts(data):
    """The list of docs/hosts.md: the fair roulette's accuracy per epoch, time
    (and time without the 20 ms) and bytes sent per peer."""
    fair = next(r["summary"] for r in data["rows"] if r["topology"] == "fair_roulette" and r["island_delay"])
    no_delay = next((r["summary"] for r in data["rows"] if r["topology"] == "fair_roulette" and not r["island_delay"]),
                    None)
    accuracies = [f"{100 * h['test_accuracy']:.2f}%" for h in fair["history"]]
    listed = accuracies[0] if len(accuracies) == 1 else ", ".join(accuracies[:-1]) + " and " + accuracies[-1]
    without = f" (without the 20 ms: {epoch_seconds(no_delay)} s)" if no_delay else ""
    return (f"- test accuracy {listed} after epochs 1 to {len(accuracies)};\n"
            f"- {epoch_seconds(fair)} s per epoch, {fair['wall_seconds']:.0f} s in all{without};\n"
            f"- {fair['bytes_sent_per_peer'] / 1e6:.0f} MB sent per peer.\n")

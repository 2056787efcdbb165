"""What the fault figures (faults, faults_membership, churn) share."""
# scripts/faults.py's and scripts/churn.py's algorithm names -> gossamer's.
NAMES = {"crossover": "crossover_sgd", "allreduce": "allreduce_sgd"}


def mode_of(row):
    """The algorithm name and mode of a row of scripts/faults.py:
    "crossover-async" -> ("crossover_sgd", "async")."""
    name, _, mode = row["algorithm"].partition("-")
    return NAMES.get(name, name), mode or "sync"


def number(value, fmt):
    """`value` formatted, or "-" for None."""
    return "-" if value is None else format(value, fmt)


def percent(value):
    """A fraction as a percentage with two decimals, or "-" for None."""
    return number(None if value is None else 100 * value, ".2f")


def join_row(row, finished):
    """The cells the join and restart tables share, from one row of
    scripts/faults.py: algorithm, scenario, survivors (expected), `finished`
    (yes/no), accuracy (fault-free), view changes, seconds until every
    survivor stepped, and the slowest join's seconds from its process's start
    and from its start record."""
    joins = row.get("joins", [])
    start = [j["seconds"] for j in joins if j["seconds"] is not None]
    ready = [j["from_ready_seconds"] for j in joins if j["from_ready_seconds"] is not None]
    return [NAMES.get(row["algorithm"], row["algorithm"]), row["scenario"],
            f"{row['survivors']} ({row['expected_survivors']})", "yes" if finished else "no",
            f"{percent(row['test_accuracy'])} ({percent(row['baseline_accuracy'])})", str(row["view_changes"]),
            number(row["every_stepped_seconds"], ".2f"), number(max(start) if start else None, ".2f"),
            number(max(ready) if ready else None, ".2f")]

"""What the fault figures (faults, faults_membership, churn) share."""
# scripts/faults.py's and scripts/churn.py's algorithm names -> gossamer's.
NAMES = {"crossover": "crossover_sgd", "allreduce": "allreduce_sgd"}


def number(value, fmt):
    """`value` formatted, or "-" for None."""
    return "-" if value is None else format(value, fmt)


def percent(value):
    """A fraction as a percentage with two decimals, or "-" for None."""
    return number(None if value is None else 100 * value, ".2f")

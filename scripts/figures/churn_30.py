"""The 30-minute churn soak (docs/operations.md): scripts/churn.py as in
the `churn` figure, for 30 minutes per algorithm, each beside a 30-minute
fault-free run; the table as `churn` renders it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import churn  # noqa: E402

COMMAND = ["scripts/churn.sh", "--minutes", "30", "--algorithms", "crossover,sgp", "--seed", "2", "--out",
           "results/churn-30.json"]
JSON = "results/churn-30.json"


def render(data):
    """One row per algorithm, as the `churn` figure."""
    return churn.render(data)

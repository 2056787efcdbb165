"""The 30-minute churn soak of AllReduce-SGD (docs/operations.md):
scripts/churn.py as in the `churn-30` figure, for AllReduce-SGD, beside a
30-minute fault-free run; one row, rendered as the `churn` figure's.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from churn import render  # noqa: E402,F401  (the figure's renderer)

COMMAND = ["scripts/churn.sh", "--minutes", "30", "--algorithms", "allreduce", "--seed", "2", "--out",
           "results/churn-30-allreduce.json"]
JSON = "results/churn-30-allreduce.json"

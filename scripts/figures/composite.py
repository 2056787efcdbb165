"""Training speed over the composite transport against zmq tcp everywhere (docs/transports.md).

The quickstart jobs on two test hosts (network namespaces joined by 10 Gbit/s),
4 ranks on each, 5 interleaved rounds of 3 epochs per transport: median
seconds per epoch and the ratio to all-zmq (scripts/compare_composite.py;
needs root for the namespaces).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _composite import table  # noqa: E402

COMMAND = ["scripts/compare-composite.sh"]
JSON = "results/compare-composite.json"


def render(data):
    """The table: per job, seconds per epoch over zmq tcp everywhere and over the
    composite transport with each local transport, with the ratio to zmq tcp."""
    return table(data)

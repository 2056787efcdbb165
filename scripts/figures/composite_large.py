"""The composite transport against zmq tcp everywhere with a 26 times larger model
(docs/transports.md).

As the composite figure, with two hidden layers of 512 (669,706 parameters,
2.7 MB per full message), 3 interleaved rounds of 1 epoch, and only zmq ipc
and libfabric shm inside (scripts/compare_composite.py; needs root).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _composite import table  # noqa: E402

COMMAND = ["scripts/compare-composite.sh", "--jobs", "crossover,allreduce",
           "--transports", "zmq,composite_zmq,composite_shm", "--rounds", "3", "--epochs", "1",
           "--set", "model.hidden=[512, 512]", "--json", "results/compare-composite-large.json"]
JSON = "results/compare-composite-large.json"


def render(data):
    """The table: per job, seconds per epoch over zmq tcp everywhere and over the
    composite transport with zmq ipc and libfabric shm inside, with the ratio to zmq tcp."""
    return table(data)

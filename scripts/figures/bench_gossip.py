"""One Crossover-SGD exchange against one ring allreduce of the MLP's parameters (docs/algorithms.md).

8 processes over zmq on loopback (tcp, then ipc); each repetition runs one ring
allreduce and one Crossover-SGD exchange (S = 4) of 101,770 float32, interleaved,
each after a barrier; the slowest rank's time, median of 300 repetitions
(bench/gossip_exchange through scripts/bench-gossip.sh).
"""
COMMAND = ["scripts/bench-gossip.sh", "--reps", "300"]
JSON = "results/bench-gossip.json"


def render(data):
    """The table: per transport the allreduce's and the exchange's seconds, their
    ratio, and the allreduce's algorithm and bus bandwidth."""
    lines = [f"{'transport':<9} {'ranks':>5} {'bytes':>9} {'allreduce_s':>13} {'exchange_s':>13} {'ratio':>7} "
             f"{'algbw_GB/s':>11} {'busbw_GB/s':>11}"]
    for r in data:
        n, size, ar = r["world_size"], r["bytes"], r["allreduce_seconds"]
        algbw = size / ar / 1e9
        lines.append(f"{r['transport']:<9} {n:>5} {size:>9.0f} {ar:>13.6f} {r['exchange_seconds']:>13.6f} "
                     f"{r['ratio']:>7.3f} {algbw:>11.3f} {algbw * 2 * (n - 1) / n:>11.3f}")
    return "```\n" + "\n".join(lines) + "\n```\n"

"""The GPU machine's checks (scripts/device-check.sh; docs/python.md "On a
GPU", docs/transports.md and docs/collectives.md): the package and the c10d
backend built against that machine's torch, collectives on CUDA tensors
against CPU copies, the CNN example trained on the GPU under bf16 autocast,
the cost of staging a CUDA allreduce, and allreduce with a core per rank.
The JSON is scripts/device_summary.py's merge of the check's output folder.
"""
from collections import defaultdict

COMMAND = ["scripts/device-check.sh"]
JSON = "results/device/device-checks.json"
ELSEWHERE = ("on a machine with a GPU through the device tool: run(command='bash scripts/device-check.sh', "
             "carry=['.device']) after scripts/device-deps.sh, then scripts/device_summary.py on its $OUT")


def _status(ok):
    return "skipped" if ok is None else "pass" if ok else "FAIL"


def _machine(data):
    m = data["machine"]
    return f"{m['gpu']}, {m['machine']}, Python {m['python']}, torch {m['torch']} (CUDA {m['cuda']})"


def render(data):
    """Checks 1-4: one table of what ran and how it ended, then the training runs."""
    c = data["checks"]
    lines = [f"Machine: {_machine(data)}. 4 ranks, one process each, sharing the GPU.{_runs(data)}", "",
             "| check | what | result |", "| --- | --- | --- |"]
    # (A check that failed or was cut short leaves rows without results:
    # they show as failed, with their error, rather than stop the rendering.)
    if "1" in c:
        one = c["1"]
        if one.get("c10d_passed") is None or one.get("c10d_failed") is None:
            cases = "no pytest summary (the step did not finish)"
        else:
            cases = f"{one['c10d_passed']} of {one['c10d_passed'] + one['c10d_failed']} cases pass"
        lines.append(f"| 1 | the package and the c10d backend build against torch {one.get('torch', '?')} and "
                     f"import; bindings/python/tests/test_c10d.py | {cases} |")
    if "2" in c:
        rows = c["2"]["rows"]
        ops = sorted({r["op"] for r in rows if "op" in r})
        dtypes = sorted({r["dtype"] for r in rows if "dtype" in r})
        sizes = sorted({r["elements"] for r in rows if "elements" in r})
        passed = sum(1 for r in rows if r.get("ok"))
        worst = max((r.get("max_diff_over_bound") or 0) for r in rows)
        lines.append(f"| 2 | {', '.join(ops)} of CUDA {', '.join(dtypes)} tensors of "
                     f"{', '.join(f'{s:,}' for s in sizes)} elements against the same calls on CPU copies | "
                     f"{passed} of {len(rows)} rows pass; float32 bit for bit, 16-bit at most "
                     f"{worst:.2f} of the documented bound |")
    if "4" in c and not all(k in _judged(c["4"]["rows"]) for k in ("bytes", "device_seconds", "ratio")):
        error = str(_judged(c["4"]["rows"]).get("error", "no result")).strip().splitlines() or ["no result"]
        lines.append(f"| 4 | a CUDA allreduce against a CPU one | {_status(False)}: {error[-1][:120]} |")
    elif "4" in c:
        r = _judged(c["4"]["rows"])
        lines.append(f"| 4 | a {r['bytes'] >> 20} MiB float32 allreduce of a CUDA tensor against a CPU one"
                     f"{_chunk_text(r)}, median of {r['reps']} interleaved | {1000 * r['device_seconds']:.1f} ms "
                     f"against {1000 * r['cpu_seconds']:.1f} ms: ratio {r['ratio']:.2f}, target ≤ "
                     f"{r['max_ratio']:.2f}: {_status(r['ok'])} |")
    if "3" in c:
        lines += ["", "Check 3, the CNN example on the GPU under `torch.autocast(\"cuda\", dtype=torch.bfloat16)`, "
                  "3 epochs of the 60,000 training images, tested on the 10,000 test images:", "",
                  "| run | test accuracy | seconds per epoch | result |", "| --- | --- | --- | --- |"]
        for r in c["3"]["rows"]:
            acc = f"{100 * r['accuracy']:.2f}%" if r.get("accuracy") is not None else "-"
            sec = f"{r['seconds_per_epoch']:.2f}" if r.get("seconds_per_epoch") is not None else "-"
            why = ""
            if r.get("skipped"):
                why = ": " + r["skipped"]
            elif not r.get("ok") and r.get("error"):
                err = r["error"]
                why = (": NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\")"
                       if "Duplicate GPU" in err else ": " + err.strip().splitlines()[-1][:120])
            lines.append(f"| {r['run']} | {acc} | {sec} | {_status(r.get('ok'))}{why} |")
    if "4" in c and all("cpu_chunked_seconds" in r for r in c["4"]["rows"]):
        lines += ["", "Check 4 taken apart per staging chunk size (the judged one is the library's): the CPU "
                  "allreduce in the same chunks (the collectives alone), the pipeline's copies down and back with "
                  "no collective (every rank copying at once), and the staged call; medians in ms:", "",
                  "| chunk | chunks | CPU | CPU in chunks | copies alone | staged | staged / CPU |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in c["4"]["rows"]:
            lines.append(f"| {r['chunk_bytes'] >> 20} MiB | {r['chunks']} | {1000 * r['cpu_seconds']:.1f} | "
                         f"{1000 * r['cpu_chunked_seconds']:.1f} | {1000 * r['copies_seconds']:.1f} | "
                         f"{1000 * r['device_seconds']:.1f} | {r['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def _runs(data):
    """" Checks 1, 2, 4 at commit X (date); ...": which run gave which checks, where there were several."""
    runs = data.get("runs") or []
    if len(runs) < 2:
        return ""
    parts = [f"check{'s' if len(r['checks']) > 1 else ''} {', '.join(r['checks'])} at commit {r['commit']} "
             f"({r['date']})" for r in runs if r["checks"]]
    text = "; ".join(parts)
    return f" {text[0].upper()}{text[1:]}."


def _judged(rows):
    """Check 4's judged row: the library's chunk size; in a dry run (none judged) the largest chunk's."""
    return next((r for r in rows if r.get("ratio_judged")), rows[-1])


def _chunk_text(r):
    return f" (staged in {r['chunk_bytes'] >> 20} MiB chunks)" if "chunk_bytes" in r else ""


def _by_size(rows, key):
    table = defaultdict(dict)
    for r in rows:
        table[r["bytes"]][key(r)] = r
    return table


def _size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def render_composite(data):
    """Check 5, first part: 8 ranks bound to 8 cores, the composite transport's
    local sides against zmq everywhere: microseconds and busbw per size."""
    rows = data["checks"].get("5-composite", [])
    order = ["zmq-tcp", "zmq-ipc", "composite-zmq-ipc", "composite-socket-ipc", "composite-libfabric-shm"]
    present = [t for t in order if any(r["transport"] == t for r in rows)]
    table = _by_size(rows, lambda r: r["transport"])
    lines = [f"Machine: {_machine(data)}. Ring allreduce of float32, 8 ranks bound to 8 cores; the composite "
             "transport splits them into two hosts of 4 (the named local transport inside, zmq tcp on loopback "
             "between). Median µs per call (busbw GB/s), one round.", "",
             "| size | " + " | ".join(present) + " |", "|---" * (len(present) + 1) + "|"]
    for b in sorted(table):
        cells = []
        for t in present:
            r = table[b].get(t)
            cells.append(f"{1e6 * r['seconds']:,.0f} ({r['busbw']:.2f})" if r else "-")
        lines.append(f"| {_size(b)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_allreduce(data):
    """Check 5, second part: ring and auto over zmq tcp at 4, 8 and 16 ranks,
    one per core: microseconds and busbw per size."""
    rows = data["checks"].get("5-allreduce", [])
    worlds = sorted({r["world_size"] for r in rows})
    table = defaultdict(dict)
    for r in rows:
        table[r["bytes"]][(r["world_size"], r["algorithm"])] = r
    head = [f"{n} ranks {a}" for n in worlds for a in ("ring", "auto")]
    lines = [f"Machine: {_machine(data)}. Float32 allreduce over zmq tcp on loopback, each rank bound to a core "
             "of its own; median µs per call (busbw GB/s), one round.", "",
             "| size | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for b in sorted(table):
        cells = []
        for n in worlds:
            for a in ("ring", "auto"):
                r = table[b].get((n, a))
                cells.append(f"{1e6 * r['seconds']:,.0f} ({r['busbw']:.2f})" if r else "-")
        lines.append(f"| {_size(b)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

#!/usr/bin/python3
"""Merges the output folder of scripts/device-check.sh (the device tool's $OUT:
device-check.json, check-*.json, device-check.log) into one JSON file, the data
of the figure device-checks (scripts/figures/device_checks.py).

    scripts/device_summary.py FOLDER [-o results/device/device-checks.json]
        [--earlier MERGED.json --earlier-commit C]

Written: {"steps": {step: {"exit", "seconds"}}, "machine": {...}, "checks":
{"1": {...import..., "c10d_passed", "c10d_failed"}, "2": {rows...},
"3": {...}, "4": {...}, "5-composite": [rows], "5-allreduce": [rows]}}; a
check whose file is missing is absent. With --earlier, a check missing from
FOLDER is taken from an earlier run's merge, measured at --earlier-commit,
and "runs" says which checks each run gave: [{"checks", "commit", "date"}],
FOLDER's first. Exit status 1 (and a message) if FOLDER has no
device-check.json.
"""
import argparse
import json
import os
import re
import sys

FILES = {"1": "check-1-import.json", "2": "check-2-tensors.json", "3": "check-3-train.json",
         "4": "check-4-staging.json", "5-composite": "check-5-composite.json",
         "5-allreduce": "check-5-allreduce.json"}


def load(path):
    """The JSON at `path`, or None if there is none."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pytest_counts(log):
    """(passed, failed) of the last pytest summary line in the log text, or (None, None)."""
    found = re.findall(r"^=*\s*(?:(\d+) failed)?(?:, )?(?:(\d+) passed)?[^\n]* in [\d.]+s", log, re.M)
    for failed, passed in reversed(found):
        if failed or passed:
            return int(passed or 0), int(failed or 0)
    return None, None


def summarize(folder):
    """The merged dict of one device-check output folder (see the module's docstring)."""
    steps = load(os.path.join(folder, "device-check.json"))
    if steps is None:
        raise SystemExit(f"device_summary: {folder} has no device-check.json")
    # The device run merges its folder itself and keeps only the merge.
    merged = load(os.path.join(folder, "device-checks.json")) or {}
    out = {"steps": steps, "checks": dict(merged.get("checks", {}))}
    for key, name in FILES.items():
        data = load(os.path.join(folder, name))
        if data is not None:
            out["checks"][key] = data
    log_path = os.path.join(folder, "device-check.log")
    if "1" in out["checks"] and os.path.exists(log_path):
        with open(log_path, errors="replace") as f:
            passed, failed = pytest_counts(f.read())
        out["checks"]["1"].update(c10d_passed=passed, c10d_failed=failed)
    info = next((c for c in out["checks"].values() if isinstance(c, dict) and "gpu" in c), {})
    out["machine"] = {k: info.get(k) for k in ("gpu", "machine", "python", "torch", "cuda", "date")}
    return out


def check_commit(check):
    """The commit a merged check recorded: its own, or its first row's (None if none)."""
    if isinstance(check, dict) and check.get("commit"):
        return check["commit"]
    rows = check.get("rows", []) if isinstance(check, dict) else check
    return next((r["commit"] for r in rows if isinstance(r, dict) and r.get("commit")), None)


def add_earlier(data, earlier, commit):
    """Fills the checks `data` lacks from the merge `earlier`, measured at
    `commit`, and records both runs in data["runs"]."""
    own = sorted(data["checks"])
    taken = sorted(k for k in earlier["checks"] if k not in data["checks"])
    for k in taken:
        data["checks"][k] = earlier["checks"][k]
    commit_own = next((c for c in map(check_commit, (data["checks"][k] for k in own)) if c), None)
    data["runs"] = [{"checks": own, "commit": commit_own, "date": data["machine"].get("date")},
                    {"checks": taken, "commit": commit, "date": earlier["machine"].get("date")}]
    for k, v in earlier["steps"].items():
        data["steps"].setdefault(k, v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("-o", "--output", default="results/device/device-checks.json")
    ap.add_argument("--earlier", help="an earlier run's merge: the checks FOLDER lacks come from it")
    ap.add_argument("--earlier-commit", help="with --earlier: the commit that run measured")
    args = ap.parse_args()
    if bool(args.earlier) != bool(args.earlier_commit):
        ap.error("--earlier and --earlier-commit go together")
    data = summarize(args.folder)
    if args.earlier:
        add_earlier(data, load(args.earlier), args.earlier_commit)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(data, f, indent=1)
    print(f"device_summary: {len(data['checks'])} checks from {args.folder} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

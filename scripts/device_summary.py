#!/usr/bin/python3
"""Merges the output folder of scripts/device-check.sh (the device tool's $OUT:
device-check.json, check-*.json, device-check.log) into one JSON file, the data
of the figure device-checks (scripts/figures/device_checks.py).

    scripts/device_summary.py FOLDER [-o results/device/device-checks.json]

Written: {"steps": {step: {"exit", "seconds"}}, "machine": {...}, "checks":
{"1": {...import..., "c10d_passed", "c10d_failed"}, "2": {rows...},
"3": {...}, "4": {...}, "5-composite": [rows], "5-allreduce": [rows]}}; a
check whose file is missing is absent. Exit status 1 (and a message) if
FOLDER has no device-check.json.
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
    out = {"steps": steps, "checks": {}}
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("-o", "--output", default="results/device/device-checks.json")
    args = ap.parse_args()
    data = summarize(args.folder)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(data, f, indent=1)
    print(f"device_summary: {len(data['checks'])} checks from {args.folder} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

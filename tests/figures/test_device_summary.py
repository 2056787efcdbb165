"""scripts/device_summary.py: a device-check output folder merged into the
one JSON file of the figure device-checks; and that figure's rendering of
check 4 (scripts/figures/device_checks.py)."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "device_summary.py")


def run(folder, out):
    return subprocess.run(["/usr/bin/python3", SCRIPT, str(folder), "-o", str(out)], capture_output=True, text=True,
                          timeout=60)


def test_the_checks_the_steps_the_machine_and_the_c10d_counts_are_merged(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "device-check.json").write_text(json.dumps({"build": {"exit": 0, "seconds": 1.5},
                                                          "1": {"exit": 1, "seconds": 2.0}}))
    (folder / "check-1-import.json").write_text(json.dumps({"torch": "2.11.0", "backend": True}))
    (folder / "check-4-staging.json").write_text(json.dumps({"gpu": "G", "machine": "m 16 CPUs", "python": "3.12",
                                                             "torch": "2.11.0", "cuda": "13.0", "date": "d",
                                                             "rows": [{"ratio": 1.1}]}))
    (folder / "check-5-composite.json").write_text(json.dumps([{"transport": "zmq-tcp", "bytes": 4096}]))
    (folder / "device-check.log").write_text("step 1\n.....F\n= 2 failed, 37 passed in 10.33s =\nwrote x in 1.0s\n")
    out = tmp_path / "merged.json"
    done = run(folder, out)
    assert done.returncode == 0, done.stderr
    merged = json.loads(out.read_text())
    assert merged["steps"]["1"] == {"exit": 1, "seconds": 2.0}
    assert sorted(merged["checks"]) == ["1", "4", "5-composite"]
    assert merged["checks"]["1"]["c10d_passed"] == 37 and merged["checks"]["1"]["c10d_failed"] == 2
    assert merged["checks"]["4"]["rows"] == [{"ratio": 1.1}]
    assert merged["checks"]["5-composite"] == [{"transport": "zmq-tcp", "bytes": 4096}]
    assert merged["machine"] == {"gpu": "G", "machine": "m 16 CPUs", "python": "3.12", "torch": "2.11.0",
                                 "cuda": "13.0", "date": "d"}


def test_a_folder_without_the_step_summary_is_refused(tmp_path):
    done = run(tmp_path, tmp_path / "merged.json")
    assert done.returncode != 0 and "no device-check.json" in done.stderr
    assert not (tmp_path / "merged.json").exists()


def _render(check4_rows=None, check3_rows=None):
    import sys
    sys.path.insert(0, os.path.join(ROOT, "scripts", "figures"))
    import device_checks
    machine = {"gpu": "G", "machine": "m 16 CPUs", "python": "3.12", "torch": "2.11.0", "cuda": "13.0"}
    checks = {}
    if check4_rows is not None:
        checks["4"] = {"rows": check4_rows}
    if check3_rows is not None:
        checks["3"] = {"rows": check3_rows}
    return device_checks.render({"machine": machine, "checks": checks})


def _staging_row(chunk_mib, staged_ms, judged):
    return {"bytes": 64 << 20, "chunk_bytes": chunk_mib << 20, "chunks": 64 // chunk_mib, "reps": 10,
            "cpu_seconds": 0.05, "cpu_chunked_seconds": 0.055, "copies_seconds": 0.004 * chunk_mib,
            "device_seconds": staged_ms / 1000, "ratio": staged_ms / 50, "max_ratio": 1.15,
            "ratio_judged": judged, "ok": not judged or staged_ms / 50 <= 1.15}


def test_check_4_shows_the_judged_chunk_size_and_the_staged_call_taken_apart():
    text = _render([_staging_row(4, 90.0, False), _staging_row(16, 60.0, False), _staging_row(64, 55.0, True)])
    line = next(ln for ln in text.splitlines() if ln.startswith("| 4 |"))
    assert "staged in 64 MiB chunks" in line and "55.0 ms against 50.0 ms: ratio 1.10" in line and "pass" in line
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and " MiB | " in ln and "ratio" not in ln]
    assert table == ["| 4 MiB | 16 | 50.0 | 55.0 | 16.0 | 90.0 | 1.80 |",
                     "| 16 MiB | 4 | 50.0 | 55.0 | 64.0 | 60.0 | 1.20 |",
                     "| 64 MiB | 1 | 50.0 | 55.0 | 256.0 | 55.0 | 1.10 |"]


def test_check_4_of_a_run_that_timed_one_chunk_size_renders_without_the_breakdown():
    row = {"bytes": 64 << 20, "reps": 10, "cpu_seconds": 0.0525, "device_seconds": 0.0932, "ratio": 1.776,
           "max_ratio": 1.15, "ratio_judged": True, "ok": False}
    text = _render([row])
    assert "| 4 | a 64 MiB float32 allreduce of a CUDA tensor against a CPU one, median of 10 interleaved | " \
           "93.2 ms against 52.5 ms: ratio 1.78, target ≤ 1.15: FAIL |" in text
    assert "taken apart" not in text


def test_check_3_shows_a_skipped_run_with_its_reason_and_a_failed_one_with_its_error():
    rows = [{"run": "ddp-gloo", "accuracy": 0.9065, "seconds_per_epoch": 3.3, "ok": True},
            {"run": "ddp-nccl", "accuracy": None, "seconds_per_epoch": None, "ok": None,
             "skipped": "NCCL refuses more than one rank on a GPU: 4 ranks, 1 GPU"},
            {"run": "ddp-gossamer", "accuracy": None, "seconds_per_epoch": None, "ok": False,
             "error": "exited 1: Traceback\nRuntimeError: boom"}]
    text = _render(check3_rows=rows)
    assert "| ddp-gloo | 90.65% | 3.30 | pass |" in text
    assert "| ddp-nccl | - | - | skipped: NCCL refuses more than one rank on a GPU: 4 ranks, 1 GPU |" in text
    assert "| ddp-gossamer | - | - | FAIL: RuntimeError: boom |" in text


def test_a_later_run_of_some_steps_takes_the_rest_from_an_earlier_runs_merge_and_names_both_runs(tmp_path):
    # The later run kept only its own merge (the device run deletes the check
    # files); its checks win, the earlier run gives the others, each named
    # with its commit in the figure.
    later = tmp_path / "later"
    later.mkdir()
    (later / "device-check.json").write_text(json.dumps({"4": {"exit": 0, "seconds": 17.0}}))
    staging = {"gpu": "G", "machine": "m", "python": "3.12", "torch": "2.11.0", "cuda": "13.0", "date": "late",
               "commit": "bbbbbbb", "rows": [_staging_row(16, 52.0, True)]}
    (later / "device-checks.json").write_text(json.dumps({"checks": {"4": staging}}))
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({
        "steps": {"4": {"exit": 1, "seconds": 15.0}, "3": {"exit": 77, "seconds": 80.0}},
        "machine": {"date": "early"},
        "checks": {"4": {"rows": [_staging_row(64, 60.0, True)]},
                   "3": {"rows": [{"run": "ddp-gloo", "accuracy": 0.9, "seconds_per_epoch": 3.0, "ok": True}]}}}))
    out = tmp_path / "merged.json"
    done = subprocess.run(["/usr/bin/python3", SCRIPT, str(later), "-o", str(out), "--earlier", str(earlier),
                           "--earlier-commit", "aaaaaaa"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    merged = json.loads(out.read_text())
    assert merged["checks"]["4"]["rows"][0]["chunk_bytes"] == 16 << 20
    assert merged["checks"]["3"]["rows"][0]["run"] == "ddp-gloo"
    assert merged["steps"] == {"4": {"exit": 0, "seconds": 17.0}, "3": {"exit": 77, "seconds": 80.0}}
    assert merged["runs"] == [{"checks": ["4"], "commit": "bbbbbbb", "date": "late"},
                              {"checks": ["3"], "commit": "aaaaaaa", "date": "early"}]
    import sys
    sys.path.insert(0, os.path.join(ROOT, "scripts", "figures"))
    import device_checks
    text = device_checks.render(merged)
    assert "Check 4 at commit bbbbbbb (late); check 3 at commit aaaaaaa (early)." in text
    lone = subprocess.run(["/usr/bin/python3", SCRIPT, str(later), "-o", str(out), "--earlier", str(earlier)],
                          capture_output=True, text=True, timeout=60)
    assert lone.returncode == 2 and "go together" in lone.stderr

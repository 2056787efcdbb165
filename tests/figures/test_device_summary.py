"""scripts/device_summary.py: a device-check output folder merged into the
one JSON file of the figure device-checks."""
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

"""bench/device_checks.py staging, as a dry run on the CPU (the "device"
tensor is a CPU tensor taken through the staging pipeline with synchronous
copies): the staged call is timed with the two sides that take it apart, the
collectives alone in the same chunks and the pipeline's copies alone."""

import json
import os
import subprocess
import sys

ROOT = os.environ.get("GOSSAMER_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "bench", "device_checks.py")


def staging(tmp_path, *extra):
    out = tmp_path / "staging.json"
    done = subprocess.run([sys.executable, SCRIPT, "staging", "--device", "cpu", "--world-size", "2", "--json",
                           str(out), *extra], capture_output=True, text=True, timeout=240)
    return done, (json.loads(out.read_text()) if out.exists() else None)


def test_the_staging_dry_run_times_the_chunked_collectives_and_the_copies_apart(tmp_path):
    done, result = staging(tmp_path, "--mib", "2", "--chunk-mib", "1,2", "--reps", "2", "--warmup", "1",
                           "--timeout", "200")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = result["rows"]
    assert [r["chunk_bytes"] for r in rows] == [1 << 20, 2 << 20]
    assert [r["chunks"] for r in rows] == [2, 1]
    for r in rows:
        assert r["dry_run"] and r["correct"] and r["ok"] and not r["ratio_judged"]
        assert r["bytes"] == 2 << 20 and r["world_size"] == 2
        for key in ("cpu_seconds", "cpu_chunked_seconds", "copies_seconds", "device_seconds"):
            assert 0 < r[key] < 60, (key, r[key])
        assert abs(r["ratio"] - r["device_seconds"] / r["cpu_seconds"]) < 1e-12
    assert rows[0]["cpu_seconds"] == rows[1]["cpu_seconds"]  # one CPU side for every chunk size
    assert "chunked s" in done.stdout and "copies s" in done.stdout


def test_bad_chunk_sizes_are_refused_before_any_rank_starts(tmp_path):
    done, result = staging(tmp_path, "--chunk-mib", "4,0")
    assert done.returncode == 2 and "--chunk-mib must be positive" in done.stderr
    assert result is None

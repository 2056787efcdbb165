"""gossamer-report (scripts/gossamer-report) on run directories made here:
the numbers behind its plots, the files it writes, --compare, and bad input."""
import importlib.machinery
import importlib.util
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "scripts", "gossamer-report")
PNG = b"\x89PNG\r\n\x1a\n"


def load_tool():
    loader = importlib.machinery.SourceFileLoader("gossamer_report", TOOL)
    spec = importlib.util.spec_from_loader("gossamer_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


report = load_tool()


def make_run(path, ranks=4, steps=20, t0=1.7e9, stall=True, view=True, algorithm="crossover_sgd"):
    """A run directory like gossamer-train's: every rank sends 1000 bytes per
    step to rank (r+1) % ranks and 500 to (r+2) % ranks; rank 0 writes two
    epoch records; rank 2 reports a stall on rank 1, which reports a pause."""
    os.makedirs(path, exist_ok=True)
    for r in range(ranks):
        recs = [{"kind": "start", "rank": r, "time": t0, "step": 0, "world_size": ranks,
                 "algorithm": algorithm, "host": f"h{r % 2}"}]
        for s in range(1, steps + 1):
            sent = {str((r + 1) % ranks): 1000, str((r + 2) % ranks): 500}
            received = {str((r - 1) % ranks): 1000, str((r - 2) % ranks): 500}
            recs.append({"kind": "step", "rank": r, "time": t0 + 0.1 * s, "step": s, "steps": 1,
                         "compute_s": 0.05, "communication_s": 0.02, "waiting_s": 0.03, "sent_bytes": sent,
                         "received_bytes": received, "push_sum_weight": 1.0, "view": 0, "loss": 2.0 / s})
            if r == 0 and s in (steps // 2, steps):
                recs.append({"kind": "epoch", "rank": 0, "time": t0 + 0.1 * s, "step": s,
                             "epoch": 1 if s < steps else 2, "loss": 1.0 / s, "test_accuracy": 0.5 + s / 100,
                             "test_accuracy_rank0": 0.5, "consensus_distance": 1e-3 / s, "seconds": 1.0})
        if stall and r == 2:
            recs.append({"kind": "stall", "rank": 2, "time": t0 + 1.5, "step": 7, "peers": [1],
                         "operation": "allreduce", "send": False, "tag_step": 7, "segment": 0, "waited_s": 1.0,
                         "since": t0 + 0.5, "last_from_peer": [], "message": "stall"})
        if stall and r == 1:
            recs.append({"kind": "pause", "rank": 1, "time": t0 + 1.6, "step": 0, "paused_s": 1.1,
                         "since": t0 + 0.5, "message": "pause"})
        if view and r == 0:
            recs.append({"kind": "view", "rank": 0, "time": t0 + 1.8, "step": 9, "view": 1, "members": [0, 1, 2],
                         "lost": [3], "joined": [], "agreement_s": 0.01, "resume_step": 9})
        recs.append({"kind": "custom_app_kind", "rank": r, "time": t0 + 2.5, "step": steps, "x": "ignored"})
        recs.append({"kind": "end", "rank": r, "time": t0 + 3, "step": steps, "steps": steps, "wall_s": 3.0})
        with open(os.path.join(path, f"rank-{r}.jsonl"), "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in recs))
    return path


def run_tool(*args):
    return subprocess.run(["/usr/bin/python3", TOOL, *args], capture_output=True, text=True, timeout=120)


def test_link_bytes_sums_each_senders_step_records(tmp_path):
    run = report.load_run(make_run(str(tmp_path / "a")))
    m = report.link_bytes(run)
    assert len(m) == 4
    for r in range(4):
        assert m[r][(r + 1) % 4] == 20 * 1000
        assert m[r][(r + 2) % 4] == 20 * 500
        assert m[r][r] == 0 and m[r][(r + 3) % 4] == 0


def test_step_split_and_stall_chain(tmp_path):
    run = report.load_run(make_run(str(tmp_path / "b")))
    split = report.step_split(run)
    c, m, w, n = split[3]
    assert (round(c, 9), round(m, 9), round(w, 9), n) == (1.0, 0.4, 0.6, 20)
    # Rank 2 waited on rank 1, which did not run: the chain ends at rank 1.
    assert report.stall_chains(run) == {1: 1}
    numbers = report.run_numbers(run)
    assert numbers["stalls"] == 1 and numbers["pauses"] == 1 and numbers["view_changes"] == 1
    assert numbers["hosts"] == 2 and numbers["world_size"] == 4 and numbers["steps"] == 20
    assert numbers["mb_sent"] == pytest.approx(4 * 20 * 1500 / 1e6)


def test_a_run_directory_gets_its_plots_and_a_summary_that_embeds_them(tmp_path):
    run_dir = make_run(str(tmp_path / "run"))
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump({"algorithm": "crossover_sgd", "test_accuracy": 0.8123, "wall_seconds": 3.0,
                   "consensus_distance": 5e-5}, f)
    p = run_tool(run_dir)
    assert p.returncode == 0, p.stderr
    out = os.path.join(run_dir, "report")
    pngs = ["accuracy_loss.png", "consensus.png", "step_rate.png", "link_bytes.png", "step_time.png",
            "timeline.png"]
    import matplotlib.image as mpimg
    for name in pngs:
        path = os.path.join(out, name)
        assert path in p.stdout.splitlines()
        with open(path, "rb") as f:
            assert f.read(8) == PNG
        h, w = mpimg.imread(path).shape[:2]
        assert h > 100 and w > 100
    md = open(os.path.join(out, "report.md")).read()
    for name in pngs:
        assert f"]({name})" in md
    assert "| crossover_sgd | 4 | 2 | 20 | 3.0 s | 81.23% | 5.000e-05 |" in md
    assert "| 0.1 | 1 | 1 | 1 | 0 |" in md  # 0.12 MB sent, 1 stall, 1 pause, 1 view change, 0 errors
    assert "Stall reports end at: rank 1 (1 report)" in md
    # Per rank: 20 steps in 2 s of step time; 50/20/30 %; 0.03 MB sent and received.
    assert "| 3 | 10.0 | 50.0% | 20.0% | 30.0% | 0.0 | 0.0 |" in md


def test_a_run_without_epochs_or_events_says_which_plots_it_skipped(tmp_path):
    run_dir = str(tmp_path / "embedded")
    make_run(run_dir, stall=False, view=False)
    for r in range(4):  # an embedding application: no epoch records
        path = os.path.join(run_dir, f"rank-{r}.jsonl")
        lines = [x for x in open(path) if '"kind": "epoch"' not in x]
        open(path, "w").write("".join(lines))
    p = run_tool(run_dir, "--out", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    md = open(tmp_path / "out" / "report.md").read()
    assert "Not drawn: no epoch records" in md
    assert "Not drawn: none happened" in md
    assert not (tmp_path / "out" / "accuracy_loss.png").exists()
    assert (tmp_path / "out" / "link_bytes.png").exists()


def test_compare_overlays_runs_with_one_table_row_each(tmp_path):
    a = make_run(str(tmp_path / "a"), algorithm="crossover_sgd")
    b = make_run(str(tmp_path / "b"), algorithm="allreduce_sgd", stall=False)
    p = run_tool("--compare", a, b, "--out", str(tmp_path / "cmp"))
    assert p.returncode == 0, p.stderr
    md = open(tmp_path / "cmp" / "report.md").read()
    assert "| crossover_sgd |" in md and "| allreduce_sgd |" in md
    for name in ("accuracy_loss.png", "consensus.png", "bytes.png"):
        assert (tmp_path / "cmp" / name).read_bytes()[:8] == PNG
    p = run_tool("--compare", a, b, "--out", str(tmp_path / "cmp2"), "--labels", "x,y")
    assert p.returncode == 0 and "| x |" in open(tmp_path / "cmp2" / "report.md").read()
    p = run_tool("--compare", a, b, "--out", str(tmp_path / "cmp3"), "--labels", "x")
    assert p.returncode == 2 and "2 runs" in p.stderr
    p = run_tool("--compare", a, b)
    assert p.returncode == 2 and "--out" in p.stderr


@pytest.mark.parametrize("line, message", [
    ("{not json", ":2: not JSON"),
    ('["a", "list"]', ":2: a record must be a JSON object"),
    ('{"kind": "step", "rank": 0, "time": 1.0}', ":2: field 'step' is missing"),
    ('{"kind": "step", "rank": "0", "time": 1.0, "step": 1}', ":2: field 'rank' is str, expected int"),
    ('{"kind": "step", "rank": 0, "time": 1.0, "step": 1, "steps": 1, "compute_s": 0, "communication_s": 0, '
     '"waiting_s": 0, "sent_bytes": [], "received_bytes": {}}', ":2: field 'sent_bytes' is list, expected dict"),
])
def test_bad_lines_are_errors_naming_file_and_line(tmp_path, line, message):
    run_dir = tmp_path / "bad"
    run_dir.mkdir()
    good = json.dumps({"kind": "start", "rank": 0, "time": 1.0, "step": 0})
    (run_dir / "rank-0.jsonl").write_text(good + "\n" + line + "\n" + good + "\n")
    p = run_tool(str(run_dir))
    assert p.returncode == 2
    assert str(run_dir / "rank-0.jsonl") + message in p.stderr
    assert "Traceback" not in p.stderr


def test_missing_or_empty_run_directories_are_errors(tmp_path):
    p = run_tool(str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "not a directory" in p.stderr
    p = run_tool(str(tmp_path))
    assert p.returncode == 2 and "no rank-<R>.jsonl" in p.stderr


def test_a_last_line_cut_short_is_skipped_with_a_warning(tmp_path):
    run_dir = make_run(str(tmp_path / "cut"))
    with open(os.path.join(run_dir, "rank-1.jsonl"), "a") as f:
        f.write('{"kind": "step", "rank": 1, "ti')
    p = run_tool(run_dir)
    assert p.returncode == 0, p.stderr
    assert "rank-1.jsonl:" in p.stderr and "cut short" in p.stderr
    assert "cut short" in open(os.path.join(run_dir, "report", "report.md")).read()


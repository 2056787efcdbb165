"""scripts/figures.py: the figure blocks of README.md and docs/ against their
modules and stored data, and the renderer's mechanics on a scratch tree."""
import importlib.util
import json
import os
import shutil
import subprocess
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_figures_py(root):
    spec = importlib.util.spec_from_file_location("figures_under_test", os.path.join(root, "scripts", "figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_block_names_a_figure_has_a_stamp_and_matches_its_stored_data():
    figures = load_figures_py(ROOT)
    problems, _pending = figures.check(figures.load_figures())
    assert problems == []


def test_every_stored_figure_names_its_command_date_and_commit():
    figures = load_figures_py(ROOT)
    known = figures.load_figures()
    store = os.path.join(ROOT, "docs", "figures")
    names = [f[:-5] for f in os.listdir(store) if f.endswith(".json")] if os.path.isdir(store) else []
    assert names, f"no stored figure in {store}: nothing to check"
    for name in names:
        assert name in known, f"docs/figures/{name}.json belongs to no module of scripts/figures/"
        stored = figures.load_stored(name)
        assert stored["figure"] == name
        assert stored["command"].split()[0] == known[name].COMMAND[0]
        assert len(stored["date"]) >= 16 and stored["date"][4] == "-"
        subprocess.run(["git", "-C", ROOT, "cat-file", "-e", stored["commit"].split()[0] + "^{commit}"], check=True)


@pytest.fixture
def scratch(tmp_path):
    """A repository of one document, one figure module and a command that
    writes JSON, so that measuring and rendering run for real."""
    root = tmp_path / "repo"
    (root / "scripts" / "figures").mkdir(parents=True)
    (root / "docs").mkdir()
    shutil.copy(os.path.join(ROOT, "scripts", "figures.py"), root / "scripts" / "figures.py")
    (root / "scripts" / "emit.py").write_text(textwrap.dedent("""\
        import json, os, sys
        os.makedirs("results", exist_ok=True)
        json.dump({"rows": [{"size": int(sys.argv[1]), "ms": 1.25}]}, open("results/emit.json", "w"))
        """))
    (root / "scripts" / "figures" / "emit_demo.py").write_text(textwrap.dedent("""\
        COMMAND = ["/usr/bin/python3", "scripts/emit.py", "4096"]
        JSON = "results/emit.json"
        def render(data):
            return "| size | ms |\\n|---|---|\\n" + "".join(f"| {r['size']} | {r['ms']:.2f} |\\n" for r in data["rows"])
        def render_short(data):
            return f"{data['rows'][0]['ms']:.1f} ms"
        """))
    (root / "README.md").write_text("# demo\n\nbefore\n\n<!-- figure emit-demo -->\nold\n<!-- /figure emit-demo -->\n\n"
                                    "In short: <!-- figure emit-demo.short -->\nold\n<!-- /figure emit-demo.short -->\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    return root


def run_figures(root, *args):
    return subprocess.run(["/usr/bin/python3", str(root / "scripts" / "figures.py"), *args], cwd=root,
                          capture_output=True, text=True, timeout=60)


def test_measuring_stores_command_date_commit_and_renders_every_view(scratch):
    before = run_figures(scratch, "--check")
    assert before.returncode == 1 and "does not open with" in before.stderr
    done = run_figures(scratch, "emit-demo")
    assert done.returncode == 0, done.stderr
    stored = json.loads((scratch / "docs" / "figures" / "emit-demo.json").read_text())
    assert stored["data"] == {"rows": [{"size": 4096, "ms": 1.25}]}
    assert stored["command"] == "/usr/bin/python3 scripts/emit.py 4096"
    head = subprocess.run(["git", "-C", str(scratch), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert stored["commit"] == head
    text = (scratch / "README.md").read_text()
    assert f"*Measured {stored['date']} at commit {head}: `/usr/bin/python3 scripts/emit.py 4096`*" in text
    assert "| 4096 | 1.25 |" in text and "1.2 ms" in text and "old" not in text
    assert text.startswith("# demo\n\nbefore\n\n<!-- figure emit-demo -->\n")
    assert run_figures(scratch, "--check").returncode == 0
    # Rendering again changes nothing; an edited block is caught.
    assert run_figures(scratch, "--render-only").returncode == 0
    assert (scratch / "README.md").read_text() == text
    (scratch / "README.md").write_text(text.replace("| 4096 | 1.25 |", "| 4096 | 0.99 |"))
    edited = run_figures(scratch, "--check")
    assert edited.returncode == 1 and "differs from what docs/figures/emit-demo.json renders" in edited.stderr


def test_an_unknown_block_a_missing_view_and_an_unquoted_figure_are_reported(scratch):
    readme = scratch / "README.md"
    readme.write_text(readme.read_text() + "\n<!-- figure nosuch -->\n*Measured 2026-01-01 at commit abcdef0: `x`*\n"
                      "<!-- /figure nosuch -->\n<!-- figure emit-demo.wide -->\nx\n<!-- /figure emit-demo.wide -->\n")
    (scratch / "scripts" / "figures" / "lonely.py").write_text("COMMAND = ['true']\nJSON = 'x.json'\n"
                                                                "def render(data):\n    return ''\n")
    out = run_figures(scratch, "--check")
    assert out.returncode == 1
    assert "block 'nosuch' names no figure" in out.stderr
    assert "block 'emit-demo.wide' names no figure" in out.stderr and "render_wide" in out.stderr
    assert "figure 'lonely' is quoted nowhere" in out.stderr


def test_a_failing_command_stores_nothing_and_changes_no_document(scratch):
    (scratch / "scripts" / "emit.py").write_text("import sys\nsys.exit(3)\n")
    before = (scratch / "README.md").read_text()
    out = run_figures(scratch, "emit-demo")
    assert out.returncode != 0
    assert not (scratch / "docs" / "figures" / "emit-demo.json").exists()
    assert (scratch / "README.md").read_text() == before


def add_elsewhere_figure(root):
    """A figure measured on another machine: its command would fail here."""
    (root / "scripts" / "figures" / "far_demo.py").write_text(textwrap.dedent("""\
        COMMAND = ["scripts/far-away.sh"]
        JSON = "results/far.json"
        ELSEWHERE = "on the far machine"
        def render(data):
            return f"far: {data['value']}\\n"
        """))
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\n<!-- figure far-demo -->\nold\n<!-- /figure far-demo -->\n")


def test_a_figure_measured_elsewhere_is_skipped_by_a_plain_run_and_stored_by_import(scratch):
    add_elsewhere_figure(scratch)
    plain = run_figures(scratch)
    assert plain.returncode == 0, plain.stderr
    assert "far-demo: measured elsewhere" in plain.stdout
    assert not (scratch / "docs" / "figures" / "far-demo.json").exists()
    named = run_figures(scratch, "far-demo")
    assert named.returncode != 0 and "measured elsewhere" in named.stderr
    missing = run_figures(scratch, "--import", "far-demo", "--date", "2026-01-02 03:04 UTC there", "--commit", "HEAD")
    assert missing.returncode != 0 and "no results/far.json" in missing.stderr
    (scratch / "results").mkdir(exist_ok=True)
    (scratch / "results" / "far.json").write_text(json.dumps({"value": 42}))
    assert run_figures(scratch, "--import", "far-demo").returncode != 0  # no --date, --commit
    unknown = run_figures(scratch, "--import", "far-demo", "--date", "2026-01-02 03:04 UTC there", "--commit",
                          "0123456789abcdef")
    assert unknown.returncode != 0 and "not in this repository" in unknown.stderr
    done = run_figures(scratch, "--import", "far-demo", "--date", "2026-01-02 03:04 UTC there", "--commit", "HEAD")
    assert done.returncode == 0, done.stderr
    stored = json.loads((scratch / "docs" / "figures" / "far-demo.json").read_text())
    head = subprocess.run(["git", "-C", str(scratch), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert stored["data"] == {"value": 42} and stored["commit"] == head
    assert stored["date"] == "2026-01-02 03:04 UTC there" and stored["command"] == "scripts/far-away.sh"
    text = (scratch / "README.md").read_text()
    assert f"*Measured 2026-01-02 03:04 UTC there at commit {head}: `scripts/far-away.sh`*\n\nfar: 42\n" in text
    assert run_figures(scratch, "--check").returncode == 0

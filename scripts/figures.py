#!/usr/bin/python3
"""Regenerates the figures that README.md and docs/ quote.

A figure is one module in scripts/figures/ (the module's file name is the
figure's name). It declares

    COMMAND   the measurement, an argument list run from the repository root
              (a script of scripts/ that writes JSON);
    JSON      the file, relative to the root, that COMMAND writes;
    render(data) -> str
              the Markdown (a table, perhaps a sentence) that the docs quote,
              from that JSON's contents.

In README.md and docs/*.md a figure is quoted between two markers:

    <!-- figure NAME -->
    ...generated, never edited by hand...
    <!-- /figure NAME -->

A figure measured on another machine (the GPU machine of
scripts/device-check.sh) also declares ELSEWHERE, a sentence saying where
and how; it is not measured by a plain run, and its data are stored with
--import once COMMAND's JSON has been brought here.

A figure whose command checks a goal and exits non-zero when it is missed
declares GOAL_MISSED_EXIT, that status: its data are stored all the same.

One measurement may be quoted in several ways: the block
`<!-- figure NAME.VIEW -->` is rendered by the module's render_VIEW(data).

Running a figure brings build/ up to date, removes its JSON, measures it
and stores what it measured, with the command, the date (UTC) and the
commit, in docs/figures/NAME.json; rendering writes,
between the markers, a stamp line that names all three, then render(data).
The stored JSON is committed with the docs, so a block can always be rendered
again from the data it came from (tests/figures checks that every block is).
A block whose figure has no stored data yet (measured before this script
existed) is left as it is; it opens with a stamp line of the same form, the
commit being the one its table was measured at, and --check lists it.

Usage:
    scripts/figures.sh                 measure and render every figure
    scripts/figures.sh NAME ...        only these
    scripts/figures.sh --render-only   render every block from docs/figures/
    scripts/figures.sh --list          the figures, their commands and blocks
    scripts/figures.sh --import NAME --date TEXT --commit C
                                       store NAME's JSON, already written (by a
                                       run elsewhere), as measured on TEXT at C
    scripts/figures.sh --check         exit 1 if a block names no figure or
                                       lacks its stamp line, a figure has no
                                       block, a block differs from what its
                                       stored data renders, or stored data
                                       name a commit this repository lacks;
                                       lists the blocks not measured by this
                                       script yet and the data measured by
                                       another command than the figure's
"""
import argparse
import datetime
import glob
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURE_DIR = os.path.join(ROOT, "scripts", "figures")
STORE_DIR = os.path.join(ROOT, "docs", "figures")
STAMP = re.compile(r"\*Measured (?P<date>\d{4}-\d{2}-\d{2}[^*]*?) at commit (?P<commit>[0-9a-f]{7,40})[^*]*?: `(?P<command>[^`]+)`\*\n")
BLOCK = re.compile(r"<!-- figure (?P<name>[a-z0-9_-]+(?:\.[a-z0-9_]+)?) -->\n(?P<body>.*?)<!-- /figure (?P=name) -->", re.S)


def load_figures():
    """Every figure module of scripts/figures/, by name.

    Raises SystemExit naming the module that lacks COMMAND, JSON or render.
    """
    figures = {}
    for path in sorted(glob.glob(os.path.join(FIGURE_DIR, "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"figure_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for attr in ("COMMAND", "JSON", "render"):
            if not hasattr(module, attr):
                raise SystemExit(f"{path}: a figure declares COMMAND, JSON and render(); {attr} is missing")
        figures[name.replace("_", "-")] = module
    return figures


def documents():
    """README.md and every docs/*.md, the files whose blocks are rendered."""
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def blocks(text):
    """(name, body) of every figure block of a Markdown text, in order."""
    return [(m.group("name"), m.group("body")) for m in BLOCK.finditer(text)]


def stamp(stored):
    """The line above a figure: command, date and commit it came from."""
    return f"*Measured {stored['date']} at commit {stored['commit']}: `{stored['command']}`*\n"


def split(block_name):
    """(figure name, render function name) of a block's name."""
    name, _, view = block_name.partition(".")
    return name, f"render_{view}" if view else "render"


def rendered(figure, stored, block_name):
    """A block's body: the stamp, a blank line, the figure's Markdown."""
    render = getattr(figure, split(block_name)[1])
    return stamp(stored) + "\n" + render(stored["data"]).rstrip("\n") + "\n"


def stored_path(name):
    return os.path.join(STORE_DIR, name + ".json")


def load_stored(name):
    path = stored_path(name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout.strip()


def store(name, command, date, commit, data):
    """Writes docs/figures/NAME.json: the data with its command, date and commit."""
    stored = {"figure": name, "command": command, "date": date, "commit": commit, "data": data}
    os.makedirs(STORE_DIR, exist_ok=True)
    with open(stored_path(name), "w") as f:
        json.dump(stored, f, indent=1, sort_keys=True)
        f.write("\n")


def import_data(name, figure, date, commit):
    """Stores a figure's JSON that was measured elsewhere, as measured on
    `date` (free text: the date, the time, the machine) at `commit`.

    Raises SystemExit if the JSON is missing or the commit is unknown here."""
    path = os.path.join(ROOT, figure.JSON)
    if not os.path.exists(path):
        raise SystemExit(f"figures: {name}: no {figure.JSON} to import ({getattr(figure, 'ELSEWHERE', '')})")
    try:
        commit = git("rev-parse", "--short", commit)
    except subprocess.CalledProcessError:
        raise SystemExit(f"figures: {name}: commit {commit!r} is not in this repository")
    with open(path) as f:
        data = json.load(f)
    store(name, shlex.join(str(a) for a in figure.COMMAND), date, commit, data)


def build():
    """Brings this tree's build/ up to date (ninja, when it holds one), so that
    the binaries a command runs are those of the commit its stamp names.

    Raises SystemExit if the build fails."""
    build_dir = os.path.join(ROOT, "build")  # this tree's (not $GOSSAMER_BUILD_DIR: a test's scratch copy)
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        return  # the scripts that need one build it (scripts/deps.sh)
    if subprocess.run(["nice", "ninja", "-C", build_dir], cwd=ROOT).returncode != 0:
        raise SystemExit(f"figures: the build in {build_dir} failed; nothing measured")


def measure(name, figure):
    """Runs the figure's command and stores its JSON with command, date and commit.

    The JSON is removed first, so that only what this run wrote is stored. A
    command exits 0, or with the figure's GOAL_MISSED_EXIT when it declares one
    (the data were written, and a goal they are checked against was missed:
    they are stored, since the documents must show it). Raises SystemExit on
    any other exit status or when the command wrote no JSON."""
    command = [str(a) for a in figure.COMMAND]
    print(f"figures: {name}: {shlex.join(command)}", flush=True)
    commit = git("rev-parse", "--short", "HEAD")
    # What is measured is the code: rendered documents and stored figures
    # that differ from the commit do not count.
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!README.md", ":!docs"):
        commit += " (with uncommitted changes)"
    build()
    out = os.path.join(ROOT, figure.JSON)
    if os.path.exists(out):
        os.remove(out)
    done = subprocess.run(command, cwd=ROOT)
    missed = getattr(figure, "GOAL_MISSED_EXIT", None)
    if done.returncode != 0 and done.returncode != missed:
        raise SystemExit(f"figures: {name}: the command exited with {done.returncode}; nothing stored")
    if not os.path.exists(out):
        raise SystemExit(f"figures: {name}: the command wrote no {figure.JSON}; nothing stored")
    if done.returncode != 0:
        print(f"figures: {name}: the command reports a missed goal (exit {done.returncode}); "
              "stored, and the documents will show it", flush=True)
    with open(out) as f:
        data = json.load(f)
    store(name, shlex.join(command), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          commit, data)


def render_documents(figures, only=None):
    """Rewrites every block of README.md and docs/*.md from docs/figures/."""
    for path in documents():
        with open(path) as f:
            text = f.read()

        def body(m):
            block = m.group("name")
            name = split(block)[0]
            stored = load_stored(name) if name in figures and (only is None or name in only) else None
            inner = rendered(figures[name], stored, block) if stored else m.group("body")
            return f"<!-- figure {block} -->\n{inner}<!-- /figure {block} -->"

        new = BLOCK.sub(body, text)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"figures: rendered {os.path.relpath(path, ROOT)}")


def check(figures):
    """(problems, pending): blocks naming no figure, without a stamp line or
    differing from their stored data, and figures quoted nowhere; and the
    blocks whose figure has no stored data yet."""
    problems, pending, quoted = [], [], set()
    for path in documents():
        with open(path) as f:
            text = f.read()
        rel = os.path.relpath(path, ROOT)
        for block, body in blocks(text):
            name, render = split(block)
            quoted.add(name)
            if name not in figures or not hasattr(figures[name], render):
                problems.append(f"{rel}: block '{block}' names no figure of scripts/figures/ (or no {render})")
            elif not STAMP.match(body):
                problems.append(f"{rel}: block '{block}' does not open with '*Measured DATE at commit C: `COMMAND`*'")
            elif (stored := load_stored(name)) is None:
                pending.append(f"{rel}: figure '{block}' has no stored data yet (scripts/figures.sh {name})")
            elif body != rendered(figures[name], stored, block):
                problems.append(f"{rel}: block '{block}' differs from what docs/figures/{name}.json renders "
                                f"(scripts/figures.sh --render-only)")
    for name in figures:
        if name not in quoted:
            problems.append(f"figure '{name}' is quoted nowhere")
    shallow = git("rev-parse", "--is-shallow-repository") != "false"
    for name, figure in figures.items():
        stored = load_stored(name)
        if stored is None:
            continue
        commit = stored["commit"].split()[0]
        if shallow:
            pending.append(f"figure '{name}': commit {commit} not looked up (a shallow clone)")
        elif subprocess.run(["git", "-C", ROOT, "cat-file", "-e", commit + "^{commit}"],
                            capture_output=True).returncode != 0:
            problems.append(f"docs/figures/{name}.json: commit {commit} is not in this repository")
        declared = shlex.join(str(a) for a in figure.COMMAND)
        if stored["command"] != declared:
            pending.append(f"figure '{name}' was measured with `{stored['command']}`, not its COMMAND "
                           f"`{declared}` (scripts/figures.sh {name} measures it as declared)")
    return problems, pending


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="figures to measure (default: every one)")
    ap.add_argument("--render-only", action="store_true", help="render from docs/figures/ without measuring")
    ap.add_argument("--list", action="store_true", help="list the figures and exit")
    ap.add_argument("--check", action="store_true", help="check the blocks against the stored data and exit")
    ap.add_argument("--import", dest="import_name", metavar="NAME",
                    help="store NAME's JSON, measured elsewhere, and render its blocks (needs --date, --commit)")
    ap.add_argument("--date", help="with --import: when and where it was measured (free text)")
    ap.add_argument("--commit", help="with --import: the commit that was measured")
    args = ap.parse_args()
    if args.import_name:
        if not (args.date and args.commit):
            ap.error("--import needs --date and --commit")
        args.names = args.names or [args.import_name]
    figures = load_figures()
    unknown = [n for n in args.names if n not in figures]
    if unknown:
        raise SystemExit(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(figures)}")
    if args.list:
        for name, figure in figures.items():
            where = [os.path.relpath(p, ROOT) for p in documents()
                     if any(split(b)[0] == name for b, _ in blocks(open(p).read()))]
            print(f"{name}: {shlex.join(str(a) for a in figure.COMMAND)} -> {figure.JSON}; in {', '.join(where)}")
        return 0
    if args.check:
        problems, pending = check(figures)
        for p in pending:
            print("pending: " + p)
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if args.import_name:
        import_data(args.import_name, figures[args.import_name], args.date, args.commit)
        render_documents(figures, only={args.import_name})
        return 0
    selected = args.names or list(figures)
    if not args.render_only:
        for name in selected:
            if hasattr(figures[name], "ELSEWHERE"):
                if args.names:
                    raise SystemExit(f"figures: {name} is measured elsewhere: {figures[name].ELSEWHERE}")
                print(f"figures: {name}: measured elsewhere, not here ({figures[name].ELSEWHERE})", flush=True)
                continue
            measure(name, figures[name])
    render_documents(figures, only=set(selected))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Checks three rules of the house's layout and prints every breach:

  functions  no function in sdk/, transports/, optimizers/, topologies/,
             apps/ or bindings/ is longer than 120 lines (measured by
             universal-ctags: from the line of its name to its end);
  includes   no header of sdk/, transports/ or optimizers/ includes a header
             of a folder above its own (a quoted include must be the public
             "gossamer/..." or resolve in the header's folder, below it, or in
             a sibling folder of the same source root; never "../");
  rank-asserts  no plain Catch2 macro (CHECK, REQUIRE, INFO, ...) in the
             body of a lambda given to onEveryRank, or to a std::thread named
             in tests/: Catch2 v2 is not thread-safe, so rank threads assert
             with tests/support/rank_checks.hpp's RANK_CHECK and kin.
             (Callbacks the library runs on a rank's thread are not seen
             here: scripts/tsan.sh finds those.)

    check_structure.py [--root DIR] [functions|includes|rank-asserts]...   (default: all)

Exits 0 when every rule holds, 1 when one does not, 2 when universal-ctags
is missing (Debian: apt-get install universal-ctags).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

MAX_LINES = 120
FUNCTION_DIRS = ["sdk", "transports", "optimizers", "topologies", "apps", "bindings"]
HEADER_DIRS = ["sdk", "transports", "optimizers"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
THREAD_START = re.compile(r"\bonEveryRank\s*\(|\bstd::thread\s*(\w+\s*)?[({]")
CATCH_ASSERT = re.compile(r"(?<![\w])((?:CHECK|REQUIRE)(?:_\w+)?|FAIL|FAIL_CHECK|SUCCEED|WARN|INFO|CAPTURE)\s*\(")
RANK_FORMS = {"CHECK", "REQUIRE", "CHECK_FALSE", "CHECK_THROWS_AS", "CHECK_THROWS_WITH"}
LITERAL_OR_COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def long_functions(root):
    """(lines, name, file) of every function over MAX_LINES lines."""
    ctags = shutil.which("ctags")
    if ctags is None or "Universal Ctags" not in subprocess.run(
            [ctags, "--version"], capture_output=True, text=True).stdout:
        print("check_structure: universal-ctags is missing (apt-get install universal-ctags)", file=sys.stderr)
        sys.exit(2)
    dirs = [d for d in FUNCTION_DIRS if os.path.isdir(os.path.join(root, d))]
    out = subprocess.run([ctags, "-R", "--languages=C++", "--fields=+ne", "--kinds-c++=f", "-x",
                          "--_xformat=%{end} %{line} %N %F"] + dirs,
                         cwd=root, capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        lines = int(parts[0]) - int(parts[1]) + 1
        if lines > MAX_LINES:
            found.append((lines, parts[2], parts[3]))
    return sorted(found, reverse=True)


def source_root(path):
    """The folder a header's quoted includes also resolve against: its
    component's src/ (sdk/src, transports/zmq/src, optimizers/src), or None
    for a public header."""
    parts = path.split(os.sep)
    if "src" in parts:
        return os.sep.join(parts[:parts.index("src") + 1])
    return None


def bad_includes(root):
    """(header, line, include, why) of every include that reaches above."""
    found = []
    for top in HEADER_DIRS:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".hpp", ".h")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                here = os.path.dirname(path)
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1).startswith("gossamer/"):
                            continue
                        why = reaches_above(root, here, source_root(path), m.group(1))
                        if why:
                            found.append((path, number, m.group(1), why))
    return found


def blank_literals(text):
    """`text` with its comments and string and character literals blanked
    (same length, newlines kept), so braces and names in them do not count."""
    return LITERAL_OR_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def thread_bodies(text):
    """[begin, end) offsets of the body of the first lambda after each
    onEveryRank( or std::thread in `text` (literals already blanked)."""
    bodies = []
    for m in THREAD_START.finditer(text):
        intro = text.find("[", m.end() - 1)
        begin = text.find("{", intro) if intro >= 0 else -1
        if begin < 0 or text.find(";", m.end(), begin) >= 0:
            continue  # not started with a lambda here (a named function, a declaration)
        depth = 0
        for end in range(begin, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                bodies.append((begin, end))
                break
    return bodies


def thread_asserts(root):
    """(file, line, macro) of every plain Catch2 macro on a test's thread."""
    found = []
    for folder, _, files in os.walk(os.path.join(root, "tests")):
        for name in sorted(files):
            if not name.endswith((".cpp", ".hpp")):
                continue
            path = os.path.relpath(os.path.join(folder, name), root)
            with open(os.path.join(root, path), encoding="utf-8") as f:
                text = blank_literals(f.read())
            for begin, end in thread_bodies(text):
                for m in CATCH_ASSERT.finditer(text, begin, end):
                    found.append((path, text.count("\n", 0, m.start()) + 1, m.group(1)))
    return sorted(set(found))


def reaches_above(root, here, src, include):
    if ".." in include.split("/"):
        return "names a folder above with '..'"
    if os.path.exists(os.path.join(root, here, include)):
        return None  # this folder or below
    if src and os.path.exists(os.path.join(root, src, include)):
        target = os.path.dirname(os.path.normpath(os.path.join(src, include)))
        if here != target and here.startswith(target + os.sep):
            return f"resolves to {target}/, a folder above {here}/"
        return None  # a sibling folder of the same source root
    return "resolves nowhere under its own folders"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("rules", nargs="*", metavar="functions|includes|rank-asserts")
    args = parser.parse_args()
    rules = args.rules or ["functions", "includes", "rank-asserts"]
    for rule in rules:
        if rule not in ("functions", "includes", "rank-asserts"):
            parser.error(f"unknown rule {rule!r}: functions, includes or rank-asserts")
    failed = False
    if "functions" in rules:
        functions = long_functions(args.root)
        for lines, name, path in functions:
            print(f"{path}: {name} is {lines} lines (at most {MAX_LINES})")
        print(f"functions: {len(functions)} over {MAX_LINES} lines")
        failed |= bool(functions)
    if "includes" in rules:
        includes = bad_includes(args.root)
        for path, number, include, why in includes:
            print(f"{path}:{number}: #include \"{include}\" {why}")
        print(f"includes: {len(includes)} headers include a folder above their own")
        failed |= bool(includes)
    if "rank-asserts" in rules:
        asserts = thread_asserts(args.root)
        for path, number, macro in asserts:
            fix = (f"use RANK_{macro} (tests/support/rank_checks.hpp)" if macro in RANK_FORMS else
                   "it has no RANK_ form: let an exception leave the thread, or check on the test's thread")
            print(f"{path}:{number}: {macro} on a test's thread: {fix}")
        print(f"rank-asserts: {len(asserts)} plain Catch2 macros on threads a test starts")
        failed |= bool(asserts)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

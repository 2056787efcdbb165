#!/usr/bin/env bash
# Rewrites README.md's configuration reference (between the BEGIN/END markers)
# from the registered components: gossamer-config --schema --markdown.
# The suite checks that the two agree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GOSSAMER_BUILD_DIR:-$root/build}"
tool="$build/apps/gossamer-config"
cmake --build "$build" --target gossamer-config -j "$(nproc)" >/dev/null  # never a stale one
reference="$(mktemp)"
trap 'rm -f "$reference"' EXIT
"$tool" --schema --markdown >"$reference"
/usr/bin/python3 - "$root/README.md" "$reference" <<'PY'
import sys
readme, reference = sys.argv[1], sys.argv[2]
begin = "<!-- BEGIN gossamer-config --schema --markdown -->\n"
end = "<!-- END gossamer-config --schema --markdown -->"
text = open(readme).read()
b, e = text.index(begin), text.index(end)
text = text[: b + len(begin)] + open(reference).read() + text[e:]
open(readme, "w").write(text)
PY
echo "README.md: configuration reference regenerated"

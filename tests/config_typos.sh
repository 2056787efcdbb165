#!/usr/bin/env bash
# gossamer-config --check rejects a misspelt key in each program's section,
# naming the file and the key's line: the trainer's (model:, data:,
# training:), gossamer-sparse's (sparse:), gossamer-admm's (admm:) and the
# SDK's own (collectives:, membership:, checkpoint:).
#   config_typos.sh GOSSAMER_CONFIG
set -euo pipefail
tool="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
failures=0
# section, a misspelt key with its value (line 3 of the file)
while IFS='|' read -r section typo; do
  file="$dir/$section.yaml"
  printf 'world_size: 4\n%s:\n  %s\n' "$section" "$typo" >"$file"
  if out="$("$tool" --check "$file" 2>&1)"; then
    echo "FAIL: $section: a misspelt key was accepted: $typo"
    failures=$((failures + 1))
    continue
  fi
  key="$section.${typo%%:*}"
  if ! grep -qF "$file:3: key '$key'" <<<"$out"; then
    echo "FAIL: $section: expected '$file:3: key '$key'' in: $out"
    failures=$((failures + 1))
  else
    echo "ok: $out"
  fi
done <<'CASES'
training|epoch: 3
model|hiden: [64]
data|partitoin: iid
sparse|factor: 4
admm|rhoo: 1.0
collectives|allreduse: ring
membership|suspect_second: 2
checkpoint|every_step: 10
CASES
[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# gossamer-config --check on every YAML file of the repository (what git
# tracks, or every *.yaml/*.yml below the source tree outside build and data
# directories when it is not a git checkout): each must load against the one
# registry of every program's sections.
#   check_configs.sh GOSSAMER_CONFIG SOURCE_DIR
set -euo pipefail
tool="$1"
src="$2"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git -C "$src" ls-files '*.yaml' '*.yml' | sed "s#^#$src/#")
else
  mapfile -t files < <(find "$src" \( -name 'build*' -o -name data -o -name results -o -name node_modules \
    -o -name .git \) -prune -o \( -name '*.yaml' -o -name '*.yml' \) -print | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "no YAML files found below $src" >&2; exit 1; }
echo "checking ${#files[@]} YAML files"
"$tool" --check "${files[@]}"

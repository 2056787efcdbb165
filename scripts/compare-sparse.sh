#!/usr/bin/env bash
# Sparse synchronisation of the sparse-synchronisation paper (Yokoyama, Araki) (docs/sparse-sync.md): trains the
# factorization machine and logistic regression on the SpamAssassin features
# with 4 and 8 processes at three batch sizes, each with dense allreduce, the
# existing sparse method and direct transmission; prints the forms of the
# paper's Table II (elements sent) and Table III (seconds per epoch), checks
# that existing and direct give the same model bit for bit, and writes
# results/compare-sparse.json. See scripts/compare_sparse.py --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/spam-data.sh >/dev/null
exec /usr/bin/python3 scripts/compare_sparse.py "$@"

#!/usr/bin/env bash
# 2D-TGA-ADMM on the SpamAssassin logistic regression with 8 processes over
# ring, 2D-TGA and hierarchical allreduce (the 2D-TGA-ADMM paper (Wang et al.), Algorithm 2, Figs. 5b/6b
# and Table 4; docs/admm.md): iterations to f_rerr <= 1e-3, the convergence
# curves side by side, updating and synchronisation wait time per iteration,
# test accuracy of the consensus model against the central one. Writes
# results/compare-admm.json (and a .png when matplotlib is installed).
# Options: scripts/compare_admm.py --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/deps.sh"
gossamer_build --target gossamer-admm
"$root/scripts/spam-data.sh" >/dev/null
exec /usr/bin/python3 "$root/scripts/compare_admm.py" "$@"

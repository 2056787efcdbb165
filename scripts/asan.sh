#!/usr/bin/env bash
# The unit and conformance suites under AddressSanitizer, LeakSanitizer and
# UBSan (build-asan/, results/asan.json): scripts/sanitize.sh address, which
# says more.
#   scripts/asan.sh [catch2 test spec...]
exec "$(dirname "${BASH_SOURCE[0]}")/sanitize.sh" address "$@"

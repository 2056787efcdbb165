#!/usr/bin/env bash
# The unit and conformance suites under ThreadSanitizer (build-tsan/,
# results/tsan.json): scripts/sanitize.sh thread, which says more.
#   scripts/tsan.sh [catch2 test spec...]
exec "$(dirname "${BASH_SOURCE[0]}")/sanitize.sh" thread "$@"

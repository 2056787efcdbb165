# shellcheck shell=bash
# Sourced by the tests that run on the SpamAssassin data (scripts/spam-data.sh):
# sets $data to its directory below SOURCE_DIR/data (or $GOSSAMER_DATA_DIR),
# or exits 77 (ctest: skipped) when the files have not been made.
#   source tests/support/spam_data.sh SOURCE_DIR
data="${GOSSAMER_DATA_DIR:-$1/data}/spam"
if [ ! -f "$data/spam-train.libsvm" ] || [ ! -f "$data/spam-test.libsvm" ]; then
  echo "no $data/spam-{train,test}.libsvm (run scripts/spam-data.sh): skipped"
  exit 77
fi

#!/usr/bin/env bash
# The programs' options are checked where they are read, and a bad one is an
# error that names it, never an internal check's text ("check failed"):
# gossamer-sim's --islands, --world-size, --inside-latency-us and
# --compute-from; gossamer-train's --progress-seconds (a value it passes to
# its children as it is); gossamer-keygen's path (nothing written); a
# gossamer-sparse job over inproc (its ranks are processes), and
# gossamer-train --rank over it; gossamer-sim's --cfg without NAME:VALUE or
# with white space, and replayed step times past 10^6 s; keygen beside an
# existing secret; gossamer-sparse's bad test file (before training) and a
# diverged run; gossamer-admm without training rows.
#   cli_errors.sh GOSSAMER_TRAIN GOSSAMER_KEYGEN GOSSAMER_SPARSE GOSSAMER_ADMM [GOSSAMER_SIM]
set -uo pipefail
train="$1" keygen="$2" sparse="$3" admm="$4" sim="${5:-}"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
failures=0
printf 'world_size: 2\ntransport: {kind: inproc, timeout_seconds: 10}\nrun: {dir: ""}\n' >"$dir/job.yaml"

# expect NAME TEXT COMMAND...: COMMAND fails, and its output holds TEXT and no "check failed".
# Each is refused at once; one that is not (a job that starts) is ended after
# 10 s (its process group: a launcher and its ranks), SIGKILL 5 s later.
expect() {
  local name="$1" text="$2"
  shift 2
  local out status
  out="$(cd "$dir/cwd" && timeout -k 5 10 "$@" 2>&1)"
  status=$?
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "FAIL: $name: still running after 10 s (killed): $(head -c 300 <<<"$out")"
    failures=$((failures + 1))
  elif [ "$status" -eq 0 ]; then
    echo "FAIL: $name: exit status 0: $out"
    failures=$((failures + 1))
  elif ! grep -qF -- "$text" <<<"$out" || grep -q "check failed" <<<"$out"; then
    echo "FAIL: $name: expected '$text' (and no internal check) in: $out"
    failures=$((failures + 1))
  else
    echo "ok: $name: $(head -c 300 <<<"$out")"
  fi
}
mkdir "$dir/cwd" "$dir/empty"

if [ -x "$sim" ]; then
  expect "sim --islands above the world size" "--islands 5 is more than the 2 ranks (--world-size)" \
    "$sim" "$dir/job.yaml" --world-size 2 --islands 5
  expect "sim --islands above the config's world size" "the config's world_size" \
    "$sim" "$dir/job.yaml" --islands 3
  expect "sim --world-size above the most" "--world-size" "$sim" "$dir/job.yaml" --world-size 4097
  expect "sim --inside-latency-us nan" "--inside-latency-us" "$sim" "$dir/job.yaml" --inside-latency-us nan
  expect "sim --step-seconds inf" "--step-seconds" "$sim" "$dir/job.yaml" --step-seconds inf
  expect "sim --cfg without a colon" "is not NAME:VALUE" "$sim" "$dir/job.yaml" --world-size 2 --cfg nocolon
  # SimGrid splits an item at white space (and aborted on the second part).
  expect "sim --cfg with a space" "is not NAME:VALUE" "$sim" "$dir/job.yaml" --world-size 2 \
    --cfg 'network/latency-factor:1 2'
  printf '<?xml version="1.0"?>\n<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n<platform version="4.1">\n<zone id="z" routing="None">\n<host id="rank-0" speed="1Gf"/>\n<host id="rank-1" speed="1Gf"/>\n</zone>\n</platform>\n' >"$dir/none.xml"
  expect "sim --platform with a zone of routing None" 'is in zone z of routing "None", which has no routes' \
    "$sim" "$dir/job.yaml" --world-size 2 --platform "$dir/none.xml"
  mkdir "$dir/huge-steps"
  for r in 0 1; do echo '{"kind":"step","compute_s":1e308}' >"$dir/huge-steps/rank-$r.jsonl"; done
  expect "sim --compute-from steps of 1e308 s" "compute_s + communication_s <= 10^6 s a step" \
    "$sim" "$dir/job.yaml" --world-size 2 --compute-from "$dir/huge-steps"
  expect "sim --compute-from a folder with no run" "sim.compute_from (--compute-from): cannot read" \
    "$sim" "$dir/job.yaml" --compute-from "$dir/empty"
  help="$(timeout -k 5 10 "$sim" --help)"
  if grep -q "1048576" <<<"$help" || ! grep -q "4096" <<<"$help"; then
    echo "FAIL: sim --help does not give 4096 as the most ranks: $help"
    failures=$((failures + 1))
  fi
elif [ -n "$sim" ]; then
  # Named (the case's name says its checks run) but not there: a failure, not a skip.
  echo "FAIL: gossamer-sim $sim is not an executable: its option checks did not run"
  failures=$((failures + 1))
else
  echo "skipped: gossamer-sim is not built (no SimGrid): its option checks did not run"
fi

expect "train diverging (learning rate 1e300)" "training diverged: the average training loss of epoch 1 is" \
  "$train" --config "$dir/job.yaml" --set training.learning_rate=1e300 --set data.train_limit=600 \
  --set data.test_limit=100 --set training.epochs=2 --progress off
expect "train --join with a job id that is not one" "is not the six letters and digits" \
  "$train" --config "$dir/job.yaml" --join abc
expect "train --rank over inproc" "--rank with transport.kind inproc" \
  "$train" --config "$dir/job.yaml" --rank 0 --rendezvous "$dir/rdv"
expect "train --progress-seconds 1e-7" "--progress-seconds" "$train" --config "$dir/job.yaml" --progress-seconds 1e-7
expect "train --progress-seconds 1e300" "--progress-seconds" "$train" --config "$dir/job.yaml" --progress-seconds 1e300
expect "train --progress-seconds nan" "--progress-seconds" "$train" --config "$dir/job.yaml" --progress-seconds nan

expect "keygen ''" "path is empty" "$keygen" ""
expect "keygen DIR" "is a directory" "$keygen" "$dir/empty"
left="$(find "$dir/cwd" "$dir/empty" -mindepth 1)"
if [ -n "$left" ]; then
  echo "FAIL: keygen left files behind: $left"
  failures=$((failures + 1))
fi
# A secret key whose public file is gone: refused, and no new public key
# appears beside the old secret one.
mkdir "$dir/keys"
"$keygen" "$dir/keys/k" >/dev/null && rm "$dir/keys/k.pub"
expect "keygen beside an existing secret key" "k exists (use --force" "$keygen" "$dir/keys/k"
if [ -e "$dir/keys/k.pub" ]; then
  echo "FAIL: keygen wrote a public key beside the old secret one"
  failures=$((failures + 1))
fi

# A test file with no rows: an accuracy of nothing is refused, not 0 %.
printf '+1 1:1\n-1 2:1\n+1 1:1 2:1\n-1 3:1\n+1 1:2\n-1 2:2\n' >"$dir/train.libsvm"
: >"$dir/empty.libsvm"
expect "sparse with an empty test file" "key 'sparse.test': $dir/empty.libsvm holds no rows" \
  "$sparse" --config "$src/examples/configs/sparse/sparse-sync.yaml" --set world_size=2 --set sparse.rounds=1 \
  --set sparse.batch_size=2 --set "sparse.train=$dir/train.libsvm" --set "sparse.test=$dir/empty.libsvm" \
  --set 'run.dir=""'
# A training file without a feature index and sparse.features 0: no width to
# bound the test file's indices by (one of them used to read past the model).
printf '+1\n-1\n+1\n-1\n' >"$dir/labels-only.libsvm"
printf '+1 200000000:1\n' >"$dir/far.libsvm"
expect "sparse with no feature index" "labels-only.libsvm: byte offset 0: holds no feature index" \
  "$sparse" --config "$src/examples/configs/sparse/sparse-sync.yaml" --set world_size=1 --set sparse.rounds=1 \
  --set sparse.batch_size=2 --set sparse.features=0 --set "sparse.train=$dir/labels-only.libsvm" \
  --set "sparse.test=$dir/far.libsvm" --set 'run.dir=""'
expect "sparse over inproc" "job.yaml:2: key 'transport.kind': gossamer-sparse runs its ranks as processes" \
  "$sparse" --config "$dir/job.yaml"
# A test file with an index past the training data's: refused before the
# first of 10^5 epochs (it used to be read after the last).
printf '+1 1:1 5:2\n-1 2:1\n' >"$dir/test5.libsvm"
expect "sparse with a bad test file, before training" "index 5 out of range: the data has 3 features" \
  "$sparse" --config "$src/examples/configs/sparse/sparse-sync.yaml" --set world_size=2 --set sparse.rounds=1 \
  --set sparse.epochs=100000 --set sparse.features=0 --set sparse.batch_size=2 \
  --set "sparse.train=$dir/train.libsvm" --set "sparse.test=$dir/test5.libsvm" --set 'run.dir=""'
# Values of 1e200: the loss is NaN, and "accuracy" of NaN scores is no result.
printf '+1 1:1e200 2:1e200\n-1 2:1e200\n+1 1:1e200 3:1e200\n-1 3:1e200\n' >"$dir/big.libsvm"
expect "sparse diverging" "training diverged: the mean training loss is" \
  "$sparse" --config "$src/examples/configs/sparse/sparse-sync.yaml" --set world_size=2 --set sparse.batch_size=2 \
  --set sparse.features=0 --set "sparse.train=$dir/big.libsvm" --set "sparse.test=$dir/big.libsvm" \
  --set sparse.model=fm --set sparse.init_stddev=1 --set sparse.epochs=3 --set 'run.dir=""'
expect "admm without training rows" "the central optimum f* is 0" \
  "$admm" --config "$src/examples/configs/sparse/admm-spam.yaml" --set world_size=2 --set admm.features=3 \
  --set "admm.train=$dir/empty.libsvm" --set "admm.test=$dir/train.libsvm" --set 'run.dir=""'
[ "$failures" -eq 0 ]

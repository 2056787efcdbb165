#!/usr/bin/env bash
# pip install ./bindings/python into a fresh virtual environment (made with
# --system-site-packages: numpy, torch and pybind11 from Debian; no index),
# building the wheel from the configured tree BUILD (setup.py builds the
# extensions' targets there, without reconfiguring it), then imports the
# installed package from outside the tree and runs a world of one through it
# and through the c10d backend.
#   pip_wheel.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
venv="$build/wheel-venv"
rm -rf "$venv"
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv"
GOSSAMER_WHEEL_BUILD_DIR="$build" "$venv/bin/pip" install --quiet --no-build-isolation --no-index \
  --no-cache-dir "$src/bindings/python"
cd "$venv"  # not the source tree: the import must find the installed package
env -u PYTHONPATH "$venv/bin/python" - <<'PY'
import os, sys, tempfile
import numpy as np
import gossamer, gossamer.torch as gt
site = os.path.join(sys.prefix, "lib")
for m in (gossamer, gossamer._core):
    assert os.path.realpath(m.__file__).startswith(os.path.realpath(site)), m.__file__
assert gt.HAS_PROCESS_GROUP, "gossamer._c10d was not installed"
with gossamer.Agent({"transport": {"kind": "zmq", "host": "127.0.0.1"}}, 0, 1, tempfile.mkdtemp()) as a:
    x = np.arange(4, dtype=np.float32)
    a.allreduce(x, op="sum")
    assert x.tolist() == [0, 1, 2, 3]
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
store = dist.HashStore()
dist.init_process_group("gossamer", store=store, rank=0, world_size=1)
t = torch.ones(3)
dist.all_reduce(t)
assert t.tolist() == [1.0, 1.0, 1.0] and dist.get_backend() == "gossamer"
dist.destroy_process_group()
print("installed", gossamer.__file__)
PY

#!/usr/bin/python3
"""The C training program (bindings/c/examples/train_fashion_mnist.c) given
WORLD_SIZE 0, which the C ABI reads as "the config's world size": two ranks
of a config whose world_size is 2 each train their half of a 640-image
subset for one epoch (10 steps of 32) and print the same averaged model's
accuracy, instead of dividing by 0.

    world_size_from_config.py C_PROGRAM DATA_DIR
"""
import sys
import tempfile

from c_ranks import run_ranks

c_program, data = sys.argv[1:3]
CONFIG = ("world_size: 2\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 60\n"
          "algorithm:\n  name: allreduce_sgd\nrun:\n  metrics: false\n")
with tempfile.TemporaryDirectory(prefix="gossamer-c-world-") as tmp:
    with open(f"{tmp}/job.yaml", "w") as f:
        f.write(CONFIG)
    results = run_ranks([[c_program, f"{tmp}/job.yaml", str(r), "0", f"{tmp}/rv", data, "1", "640"]
                         for r in range(2)], timeout=240)
print(results)
assert [r["rank"] for r in results] == [0, 1], results
assert all(r["steps"] == 10 for r in results), results  # 640 / 2 ranks / batch 32
assert results[0]["test_accuracy"] == results[1]["test_accuracy"], results  # one averaged model

#!/usr/bin/python3
"""The C training program (bindings/c/examples/train_fashion_mnist.c, the
MLP through the C ABI alone) against gossamer-train's quickstart
(examples/configs/quickstart-crossover.yaml): 4 processes each, 3 epochs;
the averaged models' test accuracies must agree within 0.3 points.

    train_matches_quickstart.py C_PROGRAM GOSSAMER_TRAIN QUICKSTART_YAML DATA_DIR
"""
import json
import subprocess
import sys
import tempfile

from c_ranks import run_ranks

c_program, train, quickstart, data = sys.argv[1:5]
with tempfile.TemporaryDirectory(prefix="gossamer-c-train-") as tmp:
    results = run_ranks([[c_program, "-", str(r), "4", f"{tmp}/rv", data, "3"] for r in range(4)], timeout=900)
    summary = f"{tmp}/summary.json"
    subprocess.run([train, "--config", quickstart, "--set", f"data.path={data}", "--set", f"run.dir={tmp}/run",
                    "--summary-json", summary], check=True, stdout=subprocess.DEVNULL, timeout=900)
    cpp = json.load(open(summary))["test_accuracy"]
c = results[0]["test_accuracy"]
print(f"C program: {100 * c:.2f}% after {results[0]['steps']} steps; gossamer-train quickstart: {100 * cpp:.2f}%")
assert all(r["test_accuracy"] == c for r in results), results  # one averaged model
assert abs(c - cpp) <= 0.003, f"C {100 * c:.2f}% vs C++ {100 * cpp:.2f}%: more than 0.3 points apart"

"""How often the membership service's multi-process test cases pass under load
(docs/operations.md).

Every test case of the multi-process suite whose name starts with "with
membership on" (survivors of a kill -9, a stopped peer removed and taken back,
a partition that heals, a killed peer restarted with --rejoin), each run 20
times with one busy process per core (scripts/repeat-tests.sh --load).
"""
import statistics

COMMAND = ["scripts/repeat-membership-tests.sh", "--runs", "20", "--load"]
JSON = "results/repeat-tests-membership.json"


def render(data):
    """The table: each case, how many of its runs passed, its median seconds per run."""
    cases = {}
    for row in data["rows"]:
        cases.setdefault(row["case"], []).append(row)
    lines = ["| case | passed | median s |", "|---|---|---|"]
    for case, rows in cases.items():
        passed = sum(1 for r in rows if r["passed"])
        median = statistics.median(r["seconds"] for r in rows)
        lines.append(f"| {case} | {passed} of {len(rows)} | {median:.1f} |")
    return "\n".join(lines) + "\n"

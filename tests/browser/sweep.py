#!/usr/bin/env python3
"""A small checkpoint sweep for `report --html` in the browser test (tests/browser/run.sh).

Usage: tests/browser/sweep.py TRACE OUT_DIR

Copies the recorded trace TRACE (tests/fixtures/view) into OUT_DIR/logs/ as 3 labels x 3 tasks
x 2 runs, each copy with its own session id, label, instance id and run; some copies keep only
their first steps (a run the scaffold stopped without submitting), so the labels differ in
behaviour too. A fourth label is `<script>alert(1)</script>` (it must come out as text). Writes
OUT_DIR/results.jsonl: stage N resolves more tasks than stage N-1.
"""
import hashlib
import json
import pathlib
import sys

LABELS = ["stage1", "stage2", "stage3", "<script>alert(1)</script>"]
TASKS = ["inventory__total-1", "inventory__total-2", "inventory__total-3"]
RUNS = 2


def main() -> None:
    trace, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    records = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for s, label in enumerate(LABELS):
        for t, task in enumerate(TASKS):
            for run in range(RUNS):
                session = hashlib.sha256(f"{label}/{task}/{run}".encode()).hexdigest()[:12]
                keep = len(records) if (s + t + run) % 3 else 5
                lines = []
                for record in records[:keep]:
                    record = json.loads(json.dumps(record))
                    record["session"] = session
                    if record["type"] == "session":
                        data = record["data"]
                        data.update(instance_id=task, task=task, run=run, label=label, model=label)
                    lines.append(json.dumps(record))
                (logs / f"{session}.jsonl").write_text("\n".join(lines) + "\n")
                resolved = (t + run) < s + 1 and s < 3
                results.append(
                    {"label": label, "instance_id": task, "run": run, "resolved": resolved}
                )
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))


if __name__ == "__main__":
    main()

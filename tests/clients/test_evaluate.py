"""The evaluation workflow (docs/evaluate.md), run as documented on a local SWE-bench-format
dataset: `scripts/evaluate.py dataset`, then `prefixes` (reference runs of a fake instruct
model through `serve --mode passthrough` with mini-swe-agent's real SWE-bench batch runner,
cut and leak-checked by `prefix build`), then `run` over a sweep of two checkpoints (two fake
base models behind the proxy, two runs each, the local judge, `report`), then `run` again
(resumed: nothing re-runs, the numbers stay).

The fake models are `fake-backend agent`: each request is answered from what it already
shows, so batch runs in any order work. What each checkpoint resolves is scripted, so the
report's Pass@k and Intersection@n are computed by hand below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, fake_backend_bin, proxy_bin, stop_process

EVALUATE = REPO / "scripts" / "evaluate.py"
TASKS = ("slugify", "paginate", "tempconv")


def bash(command: str, content: str = "") -> dict:
    return {"content": content or "Next step.", "tool_call": {"name": "bash", "arguments": {"command": command}}}


def instruct_task(match: str, source: str, test: str, edit: str, marker: str) -> dict:
    """A reference run: read, read the test, run the tests, edit, write the patch, submit."""
    return {"match": match, "variants": [[
        {"marker": f"cat {source}", "chat": bash(f"cat {source}", "Let me read the code.")},
        {"marker": f"cat {test}", "chat": bash(f"cat {test}")},
        {"marker": "unittest discover", "chat": bash("python3 -m unittest discover")},
        {"marker": marker, "chat": bash(edit)},
        {"marker": f"git diff -- {source}", "chat": bash(f"git diff -- {source} > patch.txt")},
        {"marker": "COMPLETE_TASK_AND_SUBMIT", "chat": bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt")},
    ]]}


INSTRUCT = {"tasks": [
    instruct_task("runs of spaces should", "textutil/slug.py", "tests/test_slug.py",
                  """sed -i 's/return text.replace(" ", "-")/return "-".join(text.split())/' textutil/slug.py""",
                  "sed -i"),
    instruct_task("partly filled page", "pager/pages.py", "tests/test_pages.py",
                  "sed -i 's|return total // per_page|return (total + per_page - 1) // per_page|' pager/pages.py",
                  "sed -i"),
    # Its third step is the fix: the K=3 prefix holds a gold line and is rejected.
    {"match": "returns 194.2", "variants": [[
        {"marker": "cat units/temperature.py", "chat": bash("cat units/temperature.py")},
        {"marker": "sed -i", "chat": bash("sed -i 's|return fahrenheit - 32 \\* 5 / 9|return (fahrenheit - 32) * 5 / 9|' units/temperature.py")},
        {"marker": "unittest discover", "chat": bash("python3 -m unittest discover")},
        {"marker": "git diff -- units", "chat": bash("git diff -- units/temperature.py > patch.txt")},
        {"marker": "COMPLETE_TASK_AND_SUBMIT", "chat": bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt")},
    ]]},
]}


def solves(source: str, perl: str) -> list[dict]:
    """A base-model run that reads, fixes, tests and submits (continuation text)."""
    return [
        {"marker": f"nl -ba {source}", "text": f"I will read the code first.\n\n<bash>nl -ba {source}</bash>\n"},
        {"marker": "perl -pi -e", "text": f"The bug is clear.\n\n<bash>perl -pi -e '{perl}' {source}</bash>\n"},
        {"marker": "unittest -v", "text": "Now the tests.\n\n<bash>python3 -m unittest -v</bash>\n"},
        {"marker": "submit/", "text": "The tests pass.\n\n<submit/>\n"},
    ]


# A run that looks around and submits without an edit: nudged, then terminated; empty patch.
GIVES_UP = [
    {"marker": "ls -R", "text": "Let me look around.\n\n<bash>ls -R</bash>\n"},
    {"marker": "submit/", "text": "Done.\n\n<submit/>\n"},
]
SLUG = solves("textutil/slug.py", 's/return text\\.replace\\(" ", "-"\\)/return "-".join(text.split())/')
PAGES = solves("pager/pages.py", 's|return total // per_page|return (total + per_page - 1) // per_page|')
TEMP = solves("units/temperature.py", 's|return fahrenheit - 32 \\* 5 / 9|return (fahrenheit - 32) * 5 / 9|')

# Variants are taken in turn by each new conversation of a task: run 0 the first, run 1 the next.
EARLY = {"tasks": [
    {"match": "runs of spaces should", "variants": [GIVES_UP]},
    {"match": "partly filled page", "variants": [PAGES, GIVES_UP]},
    {"match": "returns 194.2", "variants": [GIVES_UP]},
]}
LATE = {"tasks": [
    {"match": "runs of spaces should", "variants": [SLUG, GIVES_UP]},
    {"match": "partly filled page", "variants": [PAGES]},
    {"match": "returns 194.2", "variants": [TEMP]},
]}


@pytest.fixture
def agents(tmp_path):
    """Starts fake agent backends; stops them by process id at the end."""
    procs = []

    def start(name: str, script: dict) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(script))
        proc = subprocess.Popen([str(fake_backend_bin()), "--port", "0", "agent", "--script", str(path),
                                 "--record", str(tmp_path / f"{name}.requests.jsonl")],
                                stdout=subprocess.PIPE, stderr=(tmp_path / f"{name}.err").open("wb"),
                                stdin=subprocess.DEVNULL)
        procs.append(proc)
        line = proc.stdout.readline().decode()
        assert line.startswith("PORT "), (line, (tmp_path / f"{name}.err").read_text())
        return f"http://127.0.0.1:{int(line.split()[1])}/v1"

    yield start
    for p in procs:
        stop_process(p)


def evaluate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASAP_PROXY_BIN=str(proxy_bin()), HF_HOME=str(cwd / "hf"),
               HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, str(EVALUATE), *args, "--python", sys.executable]
                            if args[0] != "dataset" and args[0] != "report" else [sys.executable, str(EVALUATE), *args],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"evaluate.py {args[0]} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    return result


def sessions(logs: Path) -> list[dict]:
    return [json.loads(f.read_text().splitlines()[0])["data"] for f in sorted(logs.glob("*.jsonl"))]


def test_from_reference_prefixes_to_the_report(tmp_path, agents):
    tasks = tmp_path / "tasks"
    for name in TASKS:
        shutil.copytree(REPO / "examples" / "tasks" / name, tasks / name)

    # 1. The local dataset, in SWE-bench's format.
    evaluate("dataset", "--tasks", str(tasks), "--out", str(tmp_path / "dataset"), cwd=tmp_path)
    rows = [json.loads(l) for l in (tmp_path / "dataset" / "test.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(TASKS)
    slug = next(r for r in rows if r["instance_id"] == "slugify")
    assert len(json.loads(slug["FAIL_TO_PASS"])) == 1, slug["FAIL_TO_PASS"]
    assert json.loads(slug["FAIL_TO_PASS"])[0].startswith("tests.test_slug."), slug["FAIL_TO_PASS"]
    assert slug["patch"].startswith("diff --git a/textutil/slug.py")

    # 2. Reference prefixes from the instruct model's runs, once.
    instruct = agents("instruct", INSTRUCT)
    built = evaluate("prefixes", "--dataset", str(tmp_path / "dataset"), "--instruct", instruct,
                     "--out", str(tmp_path / "prefixes" / "set.jsonl"), cwd=tmp_path)
    prefixes = {p["instance_id"]: p for p in map(json.loads, (tmp_path / "prefixes" / "set.jsonl").read_text().splitlines())}
    assert sorted(prefixes) == ["paginate", "slugify"], built.stdout + built.stderr
    assert [s["action"]["arguments"]["command"] for s in prefixes["slugify"]["steps"]] == [
        "cat textutil/slug.py", "cat tests/test_slug.py", "python3 -m unittest discover"]
    assert "tempconv" in built.stdout and "rejected" in built.stdout, built.stdout
    assert "leaks gold line" in built.stderr, built.stderr
    provenance = json.loads((tmp_path / "prefixes" / "set.jsonl.provenance.json").read_text())
    assert provenance["k"] == 3
    reference = sessions(tmp_path / "prefixes" / "set.work" / "logs")
    assert len(reference) == 3 and {s["mode"] for s in reference} == {"passthrough"}

    # 3. A sweep of two checkpoints, two runs each, judged here, one report.
    early, late = agents("early", EARLY), agents("late", LATE)
    command = ("run", "--dataset", str(tmp_path / "dataset"), "--prefixes", str(tmp_path / "prefixes" / "set.jsonl"),
               "--checkpoint", f"stage1={early}", "--checkpoint", f"stage2={late}",
               "--runs", "2", "--workers", "2", "--out", str(tmp_path / "results"))
    first = evaluate(*command, cwd=tmp_path)
    results = tmp_path / "results"

    # Every trace: its instance, its run, the same prefix set; a same-task prefix where one was
    # kept, the demonstration for tempconv (its prefix leaked).
    for label in ("stage1", "stage2"):
        recorded = sessions(results / label / "logs")
        assert sorted((s["instance_id"], s["run"]) for s in recorded) == sorted(
            (t, r) for t in TASKS for r in (0, 1)), recorded
        assert {s["prefix_set"]["sha256"] for s in recorded} == {sessions(results / "stage1" / "logs")[0]["prefix_set"]["sha256"]}
        assert {(s["instance_id"], s["prefix_source"]) for s in recorded} == {
            ("slugify", "task"), ("paginate", "task"), ("tempconv", "demonstration")}

    # The local judge's harness-shaped reports.
    def judged(label, run):
        return json.loads((results / label / "judge" / f"{label}.run{run}.json").read_text())
    assert sorted(judged("stage2", 0)["resolved_ids"]) == ["paginate", "slugify", "tempconv"]
    assert judged("stage2", 1)["resolved_ids"] == ["paginate", "tempconv"]
    assert judged("stage2", 1)["empty_patch_ids"] == ["slugify"]
    assert judged("stage1", 0)["resolved_ids"] == ["paginate"]
    assert judged("stage1", 1)["resolved_ids"] == []

    # By hand: stage1 resolves paginate once in two runs, nothing else: Pass@1 = (0 + 1/2 + 0)/3,
    # Pass@2 = 1/3, Intersection@2 = 0. stage2: slugify once, paginate and tempconv twice:
    # Pass@1 = (1/2 + 1 + 1)/3, Pass@2 = 3/3, Intersection@2 = 2/3.
    report = json.loads((results / "report.json").read_text())
    by_label = {row["label"]: row for row in report["labels"]}
    assert by_label["stage1"]["pass_at_k"]["1"] == pytest.approx(1 / 6)
    assert by_label["stage1"]["pass_at_k"]["2"] == pytest.approx(1 / 3)
    assert by_label["stage1"]["intersection"]["solved"] == 0
    assert by_label["stage2"]["pass_at_k"]["1"] == pytest.approx(5 / 6)
    assert by_label["stage2"]["pass_at_k"]["2"] == pytest.approx(1)
    assert by_label["stage2"]["intersection"]["solved"] == 2
    assert by_label["stage2"]["intersection"]["tasks"] == 3
    # tempconv's prefix was rejected: the report says so for each label, nothing else.
    assert len(report["warnings"]) == 2 and all(
        "prefix coverage: task 66.7%, demonstration 33.3%" in w for w in report["warnings"]), report["warnings"]
    assert all(row["no_result"] == 0 for row in report["labels"])
    assert "Pass@1" in first.stdout and (results / "report.md").read_text() == first.stdout

    # 4. Resumed: nothing runs again, the report is the same.
    traces = sorted(p.name for p in results.glob("*/logs/*.jsonl"))
    again = evaluate(*command, cwd=tmp_path)
    assert sorted(p.name for p in results.glob("*/logs/*.jsonl")) == traces
    assert "already done" in again.stderr
    assert json.loads((results / "report.json").read_text()) == report

"""The evaluation workflow (docs/evaluate.md), as a new user runs it here: `scripts/evaluate.py
demo`, which runs the documented commands on a local SWE-bench-format dataset built from three
bundled tasks: `dataset`, then `prefixes` (reference runs of a fake instruct model through
`serve --mode passthrough` with mini-swe-agent's real SWE-bench batch runner, cut and
leak-checked by `prefix build`), then `run` over a sweep of two checkpoints (two fake base
models behind the proxy, two runs each, the local judge, `report`). Then an interrupted run is
resumed with `run`: only the unfinished instance runs again.

The fake models are `fake-backend agent` with the scripts in examples/evaluate/: each request
is answered from what it already shows, so batch runs in any order work. Per task, a new
conversation takes the script's next variant (a run that solves the task, or one that looks
around and submits without an edit), so what each checkpoint resolves in each run is known,
and the report's Pass@k and Intersection@n are computed by hand below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, fake_backend_bin, proxy_bin, stop_process

EVALUATE = REPO / "scripts" / "evaluate.py"
TASKS = ("slugify", "paginate", "tempconv")


@pytest.fixture
def agent(tmp_path):
    """Starts a fake model from examples/evaluate/<name>.json; stopped by process id at the end."""
    procs = []

    def start(name: str) -> str:
        err = tmp_path / f"{name}.err"
        proc = subprocess.Popen([str(fake_backend_bin()), "--port", "0", "agent", "--script",
                                 str(REPO / "examples" / "evaluate" / f"{name}.json")],
                                stdout=subprocess.PIPE, stderr=err.open("wb"), stdin=subprocess.DEVNULL)
        procs.append(proc)
        line = proc.stdout.readline().decode()
        assert line.startswith("PORT "), (line, err.read_text())
        return f"http://127.0.0.1:{int(line.split()[1])}/v1"

    yield start
    for p in procs:
        stop_process(p)


def evaluate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASAP_PROXY_BIN=str(proxy_bin()), ASAP_FAKE_BACKEND_BIN=str(fake_backend_bin()),
               HF_HOME=str(cwd / "hf"), HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, str(EVALUATE), *args, "--python", sys.executable],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"evaluate.py {args[0]} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    return result


def sessions(logs: Path) -> list[dict]:
    return [json.loads(f.read_text().splitlines()[0])["data"] for f in sorted(logs.glob("*.jsonl"))]


def test_from_reference_prefixes_to_the_report_then_resumed(tmp_path, agent):
    out = tmp_path / "demo"
    demo = evaluate("demo", "--out", str(out), cwd=tmp_path)

    # 1. The local dataset, in SWE-bench's format.
    rows = [json.loads(l) for l in (out / "dataset" / "test.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(TASKS)
    slug = next(r for r in rows if r["instance_id"] == "slugify")
    assert len(json.loads(slug["FAIL_TO_PASS"])) == 1, slug["FAIL_TO_PASS"]
    assert json.loads(slug["FAIL_TO_PASS"])[0].startswith("tests.test_slug."), slug["FAIL_TO_PASS"]
    assert slug["patch"].startswith("diff --git a/textutil/slug.py")
    assert (out / "dataset" / "repos" / "slugify.git").is_dir()

    # 2. Reference prefixes: three reference runs through passthrough, K=3, checked against the
    # gold patches; tempconv's reference edits in its third step, so its prefix leaks and goes.
    set_file = out / "prefixes" / "demo.jsonl"
    prefixes = {p["instance_id"]: p for p in map(json.loads, set_file.read_text().splitlines())}
    assert sorted(prefixes) == ["paginate", "slugify"], demo.stderr
    assert [s["action"]["arguments"]["command"] for s in prefixes["slugify"]["steps"]] == [
        "cat textutil/slug.py", "cat tests/test_slug.py", "python3 -m unittest discover"]
    assert "leaks gold line" in demo.stderr, demo.stderr
    assert "total: 3 prefixes, 2 kept, 1 rejected, 1 with leaks" in demo.stdout, demo.stdout
    provenance = json.loads(set_file.with_name("demo.jsonl.provenance.json").read_text())
    assert provenance["k"] == 3
    # The reference model by its own name (the instruct backend's /v1/models), not a label.
    assert provenance["sources"] == [{"model": "openai/fake-agent", "scaffold": "mini-swe-agent", "prefixes": 2}]
    assert provenance["leak_check"]["rejected"] == 1
    reference = sessions(out / "prefixes" / "demo.work" / "logs")
    assert sorted(s["instance_id"] for s in reference) == sorted(TASKS)
    assert {s["mode"] for s in reference} == {"passthrough"}

    # 3. The sweep. Every trace: its instance (tempconv's too, by `serve --tasks`), its run,
    # the one prefix set; a same-task prefix where one was kept, the demonstration for tempconv.
    results = out / "results"
    for label in ("stage1", "stage2"):
        recorded = sessions(results / label / "logs")
        assert sorted((s["instance_id"], s["run"]) for s in recorded) == sorted(
            (t, r) for t in TASKS for r in (0, 1)), recorded
        assert {s["prefix_set"]["sha256"] for s in recorded} == {provenance["prefix_set"]["sha256"]}
        assert {(s["instance_id"], s["prefix_source"]) for s in recorded} == {
            ("slugify", "task"), ("paginate", "task"), ("tempconv", "demonstration")}

    # The local judge's harness-shaped reports, one per label and run.
    def judged(label, run):
        return json.loads((results / label / "judge" / f"{label}.run{run}.json").read_text())
    assert sorted(judged("stage2", 0)["resolved_ids"]) == ["paginate", "slugify", "tempconv"]
    assert judged("stage2", 1)["resolved_ids"] == ["paginate", "tempconv"]
    assert judged("stage2", 1)["empty_patch_ids"] == ["slugify"]
    assert judged("stage1", 0)["resolved_ids"] == ["paginate"]
    assert judged("stage1", 1)["resolved_ids"] == []
    predictions = [json.loads(l) for l in (results / "stage2" / "predictions" / "run-0.jsonl").read_text().splitlines()]
    assert {p["model_name_or_path"] for p in predictions} == {"stage2"}
    assert "+    return \"-\".join(text.split())" in next(p for p in predictions if p["instance_id"] == "slugify")["model_patch"]

    # By hand. stage1 resolves paginate in one of two runs, nothing else: Pass@1 = (0 + 1/2 + 0)/3,
    # Pass@2 = 1/3, Intersection@2 = 0/3. stage2 resolves slugify once, paginate and tempconv
    # twice: Pass@1 = (1/2 + 1 + 1)/3, Pass@2 = 3/3, Intersection@2 = 2/3.
    report = json.loads((results / "report.json").read_text())
    by_label = {row["label"]: row for row in report["labels"]}
    assert by_label["stage1"]["pass_at_k"]["1"] == pytest.approx(1 / 6)
    assert by_label["stage1"]["pass_at_k"]["2"] == pytest.approx(1 / 3)
    assert by_label["stage1"]["intersection"]["solved"] == 0
    assert by_label["stage2"]["pass_at_k"]["1"] == pytest.approx(5 / 6)
    assert by_label["stage2"]["pass_at_k"]["2"] == pytest.approx(1)
    assert by_label["stage2"]["intersection"]["solved"] == 2
    assert by_label["stage2"]["intersection"]["tasks"] == 3
    assert all(row["no_result"] == 0 for row in report["labels"])
    # tempconv has no prefix: the report says so for each label, and nothing else.
    assert len(report["warnings"]) == 2 and all(
        "prefix coverage: task 66.7%, demonstration 33.3%" in w for w in report["warnings"]), report["warnings"]
    assert "| stage2 | 3 | 6 | 2 | 83.3 | 100.0 | 2/3 (66.7%) |" in demo.stdout, demo.stdout
    assert (results / "report.md").read_text() in demo.stdout
    # The same numbers as a page (report --html): the change from stage1 to stage2 with its p.
    page = (results / "report.html").read_text()
    assert "<script" not in page and "83.3" in page, page[:2000]
    change = next(c for c in report["changes"] if c["metric"] == "pass@1")
    assert (change["from"], change["to"]) == ("stage1", "stage2")
    assert change["delta"] == pytest.approx(5 / 6 - 1 / 6)
    assert f"{change['p_value']:.3f}" in page

    # 4. Resume after an interruption: slugify of stage2's second run has a trace but no
    # prediction. Only it runs again, its old trace goes, and only that run is judged again.
    # The fresh fake model starts its variants over, so this time slugify is solved: stage2
    # becomes Pass@1 = 3/3, Pass@2 = 3/3, Intersection@2 = 3/3; stage1 stays.
    for preds in (results / "stage2" / "run-1").glob("shard-*/preds.json"):
        kept = {k: v for k, v in json.loads(preds.read_text()).items() if k != "slugify"}
        preds.write_text(json.dumps(kept))
    old = [f.name for f in (results / "stage2" / "logs").glob("*.jsonl")]
    stage2 = agent("stage2")
    again = evaluate("run", "--dataset", str(out / "dataset"), "--prefixes", str(set_file),
                     "--checkpoint", "stage1=http://127.0.0.1:9/v1", "--checkpoint", f"stage2={stage2}",
                     "--runs", "2", "--workers", "2", "--out", str(results), cwd=tmp_path)
    assert "stage1: all 2 runs of 3 instances already done" in again.stderr, again.stderr
    assert "removing the interrupted trajectory" in again.stderr, again.stderr
    assert "stage2: run 1 (2 of 2): 1 instances" in again.stderr, again.stderr
    assert [l for l in again.stderr.splitlines() if "judging" in l] == [
        "stage2: judging run 1 (local, 3 predictions)"], again.stderr
    new = [f.name for f in (results / "stage2" / "logs").glob("*.jsonl")]
    assert len(new) == len(old) == 6 and len(set(new) - set(old)) == 1, (old, new)
    recorded = sessions(results / "stage2" / "logs")
    assert sorted((s["instance_id"], s["run"]) for s in recorded) == sorted((t, r) for t in TASKS for r in (0, 1))
    assert sorted(judged("stage2", 1)["resolved_ids"]) == sorted(TASKS)
    resumed = {row["label"]: row for row in json.loads((results / "report.json").read_text())["labels"]}
    assert resumed["stage1"]["pass_at_k"] == by_label["stage1"]["pass_at_k"]
    assert resumed["stage2"]["pass_at_k"]["1"] == pytest.approx(1)
    assert resumed["stage2"]["intersection"]["solved"] == 3


def evaluate_fails(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(EVALUATE), *args], cwd=cwd, capture_output=True, text=True,
                            timeout=600, env=dict(os.environ, ASAP_PROXY_BIN=str(proxy_bin()), HF_HOME=str(cwd / "hf"),
                                                  HF_DATASETS_OFFLINE="1", **(env or {})))
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_mistakes_fail_fast_and_backend_errors_run_again(tmp_path, agent):
    dataset = tmp_path / "dataset"
    subprocess.run([sys.executable, str(EVALUATE), "dataset", "--instances", "slugify,paginate", "--out", str(dataset)],
                   check=True, capture_output=True)
    out = str(tmp_path / "results")
    common = ("run", "--dataset", str(dataset), "--out", out, "--python", sys.executable)
    stage2 = agent("stage2")

    # Mistakes a user makes, each refused before anything runs, with what to do.
    assert "--runs must be at least 1" in evaluate_fails(*common, "--checkpoint", f"a={stage2}", "--runs", "0", cwd=tmp_path).stderr
    assert "label 'org/stage2'" in evaluate_fails(*common, "--checkpoint", f"org/stage2={stage2}", cwd=tmp_path).stderr
    assert "no such file or folder" in evaluate_fails("run", "--dataset", str(tmp_path / "nope"), "--out", out,
                                                       "--python", sys.executable, "--checkpoint", f"a={stage2}",
                                                       cwd=tmp_path).stderr
    refused = evaluate_fails(*common, "--checkpoint", "a=http://127.0.0.1:9/v1", cwd=tmp_path)
    assert "does not answer GET /models" in refused.stderr, refused.stderr
    no_v1 = evaluate_fails(*common, "--checkpoint", f"a={stage2.removesuffix('/v1')}", cwd=tmp_path)
    assert "answered HTTP 404" in no_v1.stderr and "/v1" in no_v1.stderr, no_v1.stderr
    assert not list((tmp_path / "results").glob("*/logs/*.jsonl")), "nothing ran"

    # A backend that fails for one task (no script for paginate: HTTP 500): that instance run
    # ends in an error; nothing is judged; the next invocation runs only it, and its failed
    # session is gone, so the report sees one trajectory per (instance, run).
    partial = tmp_path / "partial.json"
    script = json.loads((REPO / "examples" / "evaluate" / "stage2.json").read_text())
    script["tasks"] = [t for t in script["tasks"] if t["match"] != "partly filled page"]
    partial.write_text(json.dumps(script))
    err = tmp_path / "partial.err"
    proc = subprocess.Popen([str(fake_backend_bin()), "--port", "0", "agent", "--script", str(partial)],
                            stdout=subprocess.PIPE, stderr=err.open("wb"), stdin=subprocess.DEVNULL)
    try:
        broken = f"http://127.0.0.1:{int(proc.stdout.readline().decode().split()[1])}/v1"
        quick = {"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}
        first = evaluate_fails(*common, "--checkpoint", f"s={broken}", "--serve-arg=--backend-retries",
                               "--serve-arg=0", cwd=tmp_path, env=quick)
    finally:
        stop_process(proc)
    assert "s: run 0: paginate ended in an error" in first.stderr, first.stderr
    assert "nothing was judged" in first.stderr, first.stderr
    assert not (tmp_path / "results" / "s" / "judge").exists()
    second = evaluate(*common[:-2], "--checkpoint", f"s={stage2}", cwd=tmp_path)
    assert "s: run 0 (1 of 1): 1 instances" in second.stderr, second.stderr
    recorded = sessions(tmp_path / "results" / "s" / "logs")
    assert sorted((s["instance_id"], s["run"]) for s in recorded) == [("paginate", 0), ("slugify", 0)], recorded
    judged = json.loads((tmp_path / "results" / "s" / "judge" / "s.run0.json").read_text())
    assert sorted(judged["resolved_ids"]) == ["paginate", "slugify"], judged


def test_the_local_judge_applies_patches_as_the_harness_does(tmp_path):
    """`git apply` first; a patch whose context drifted still applies with `patch --fuzz`, as in
    the SWE-bench harness; one that matches nothing is not applied."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("evaluate", EVALUATE)
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("one = 1\ntwo = 2\nthree = 3\nfour = 4\nfive = 5\n")
    ev.git("init", "-q", cwd=repo)
    ev.git("add", "-A", cwd=repo)
    ev.git("commit", "-qm", "base", cwd=repo)
    exact = "--- a/a.py\n+++ b/a.py\n@@ -2,3 +2,3 @@\n two = 2\n-three = 3\n+three = 33\n four = 4\n"
    assert ev.apply_patch(repo, exact)[0] and "three = 33" in (repo / "a.py").read_text()
    ev.git("checkout", "-q", "--", ".", cwd=repo)
    drifted = "--- a/a.py\n+++ b/a.py\n@@ -2,3 +2,3 @@\n two = 22\n-three = 3\n+three = 33\n four = 4\n"
    applied, how = ev.apply_patch(repo, drifted)
    assert applied and "three = 33" in (repo / "a.py").read_text(), how
    ev.git("checkout", "-q", "--", ".", cwd=repo)
    wrong = "--- a/a.py\n+++ b/a.py\n@@ -2,3 +2,3 @@\n nothing\n-like = 0\n+this = 1\n here\n"
    applied, how = ev.apply_patch(repo, wrong)
    assert not applied and "patch --fuzz=5" in how
    assert (repo / "a.py").read_text() == "one = 1\ntwo = 2\nthree = 3\nfour = 4\nfive = 5\n"

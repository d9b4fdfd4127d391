"""scripts/ablation.py end to end on the scripted fake backend (no model needed): the real
mini-swe-agent and the real OpenHands SDK, the real proxy binary, one task, one run, one configuration. The scripted
continuations fix the slugify bug, run the tests and submit, so the runner must find the run
resolved and the right file edited; a second invocation must resume (skip the finished run)
and rebuild the same summary.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

# The fake completion backend (the `fake-backend` workspace crate; scripts/e2e.sh builds it).
FAKE_BACKEND = Path(os.environ.get("ASAP_FAKE_BACKEND_BIN") or REPO / "target" / "debug" / "fake-backend")
SCRIPT = [
    "The spaces must collapse.\n\n<bash>sed -i 's/return text.replace(\" \", \"-\")/return \"-\".join(text.split())/' textutil/slug.py</bash>\n",
    "Now the tests.\n\n<bash>python3 -m unittest -q</bash>\n",
    "They pass.\n\n<submit/>\n",
]


def start_fake_backend(tmp_path: Path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    proc = subprocess.Popen([str(FAKE_BACKEND), "--port", "0", "script", "--script", str(script),
                             "--record", str(tmp_path / "record.jsonl")],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])
    return proc, f"http://127.0.0.1:{port}/v1"


def run_ablation(backend: str, out: Path, scaffold: str):
    cmd = [sys.executable, str(REPO / "scripts" / "ablation.py"), "--backend", backend,
           "--task", "slugify", "--runs", "1", "--steps", "5", "--out", str(out),
           "--python", sys.executable, "--scaffold", scaffold]
    binary = os.environ.get("ASAP_PROXY_BIN")
    if binary:
        cmd += ["--proxy-bin", binary]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("scaffold,finished", [("mini", "Submitted"), ("openhands", "finished")])
def test_ablation_runner_runs_judges_and_resumes(tmp_path, scaffold, finished):
    label = f"{scaffold}-markdown_xml-k3-nudges-on-explore"  # the default prefix source
    backend, url = start_fake_backend(tmp_path)
    try:
        out = tmp_path / "out"
        first = run_ablation(url, out, scaffold)
        assert first.returncode == 0, first.stderr
        config = out / label
        rows = [json.loads(line) for line in (config / "results.jsonl").read_text().splitlines()]
        assert len(rows) == 1, rows
        row = rows[0]
        assert (row["instance_id"], row["run"], row["resolved"], row["edited_fix_file"]) == \
            ("slugify", 0, True, True), row
        assert row["changed_files"] == ["textutil/slug.py"], row
        assert row["exit_status"] == finished, row
        assert "slugify run 0:" in first.stderr and "RESOLVED" in first.stderr, first.stderr
        # The proxy traced the run under its task id and run index, with the config's label.
        traces = list((config / "logs").glob("*.jsonl"))
        assert len(traces) == 1, traces
        session = json.loads(traces[0].read_text().splitlines()[0])["data"]
        assert (session["instance_id"], session["run"], session["label"], session["format"]) == \
            ("slugify", 0, label, "markdown_xml"), session
        # The summary row: report's figures plus the runner's own.
        summary = json.loads((out / "summary.json").read_text())
        assert len(summary) == 1
        s = summary[0]
        assert s["pass_at_1"] == 1.0 and s["edited_fix_file"] == 1, s
        assert s["parsable_turns"][1:] == [3, 3], s
        assert f"| {label} | 1 | 100.0 | 1/1 |" in first.stdout, first.stdout
        calls = len((tmp_path / "record.jsonl").read_text().splitlines())

        # Resume: nothing left to run, no backend call, the same table.
        second = run_ablation(url, out, scaffold)
        assert second.returncode == 0, second.stderr
        assert "all 1 runs done, skipped" in second.stderr, second.stderr
        assert len((config / "results.jsonl").read_text().splitlines()) == 1
        assert len((tmp_path / "record.jsonl").read_text().splitlines()) == calls
        assert second.stdout == first.stdout
    finally:
        backend.terminate()
        backend.wait(5)


def test_explore_prefixes_are_real_first_steps_of_the_task(tmp_path):
    """`--prefix-source explore`: each task gets a 2-step reference prefix made by running
    generic commands in its repository (list the Python files, print the non-test sources with
    `grep -rn`), paired with the runner's demonstration (another task that opens with the same
    two commands); the proxy matches the prefix by the task header and renders the
    demonstration, then the prefix, then the live steps."""
    backend, url = start_fake_backend(tmp_path)
    try:
        out = tmp_path / "out"
        cmd = [sys.executable, str(REPO / "scripts" / "ablation.py"), "--backend", url,
               "--task", "slugify", "--runs", "1", "--steps", "5", "--out", str(out),
               "--python", sys.executable, "--scaffold", "mini", "--prefix-source", "explore"]
        if os.environ.get("ASAP_PROXY_BIN"):
            cmd += ["--proxy-bin", os.environ["ASAP_PROXY_BIN"]]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        prefix = json.loads((out / "prefixes" / "slugify.json").read_text())
        commands = [s["action"]["arguments"]["command"] for s in prefix["steps"]]
        assert len(commands) == 2 and commands[1].startswith("grep -rn"), commands
        assert "./textutil/slug.py:" in prefix["steps"][1]["observation"], prefix["steps"][1]
        assert "test_slug" not in prefix["steps"][1]["observation"], "tests are not printed"
        assert prefix["example"] == "explore-demo", prefix
        config = out / "mini-markdown_xml-k3-nudges-on-explore"
        session = json.loads(next((config / "logs").glob("*.jsonl")).read_text().splitlines()[0])["data"]
        assert session["prefix"] == {"id": "slugify", "matched_by": "header", "k": 2,
                                     "example": "explore-demo"}, session
        first_prompt = json.loads((tmp_path / "record.jsonl").read_text().splitlines()[0])["prompt"]
        example, live = first_prompt.split("\n# Trajectory\n")
        assert "# Example trajectory" in example and "./shop/cart.py:12:" in example
        assert "def slugify" in live and "shop/cart.py" not in live
        # A prefix left by another version of the explorer is made again on the next invocation.
        stale = dict(prefix, steps=prefix["steps"][:1], example=None)
        (out / "prefixes" / "slugify.json").write_text(json.dumps(stale))
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert json.loads((out / "prefixes" / "slugify.json").read_text()) == prefix
    finally:
        backend.terminate()
        backend.wait(5)

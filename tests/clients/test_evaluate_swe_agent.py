"""`scripts/evaluate.py run --scaffold swe-agent` on a local dataset, with SWE-agent's own
`run-batch` in SWE-ReX's `local` deployment (no container) against a fake base model behind the
proxy: two bundled tasks (slugify, paginate), two runs, the local judge, the report.

SWE-agent is not on PyPI: clone github.com/SWE-agent/SWE-agent, `pip install -e` it (with
`litellm==1.105.7`) into a Python 3.11+ venv and point ASAP_SWE_AGENT_PYTHON at that venv's
python. Without it the test is skipped. SWE-ReX's local runtime writes SWE-agent's tools and
state files under /root of this machine (/root/tools, /root/state.json, /root/model.patch, as
in SWE-agent's containers), so the test also needs a writable /root.

The fake model is `fake-backend agent --script examples/evaluate/stage2.json`: paginate is
solved in every run; slugify alternates between a solving variant (run 0) and one that looks
around and submits without an edit (run 1, which the proxy's submit-before-edit rule ends).
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
SWE_PYTHON = os.environ.get("ASAP_SWE_AGENT_PYTHON", "")


def _skip_reason() -> str | None:
    if not SWE_PYTHON:
        return ("ASAP_SWE_AGENT_PYTHON is not set (a Python with SWE-agent installed from its "
                "repository with pip install -e; SWE-agent is not on PyPI)")
    probe = subprocess.run([SWE_PYTHON, "-c", "import sweagent"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{SWE_PYTHON} cannot import sweagent: {probe.stderr.strip()[-300:]}"
    if not os.access("/root", os.W_OK):
        return "SWE-ReX's local deployment writes /root/tools and /root/*.json; /root is not writable"
    return None


SKIP = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def evaluate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASAP_PROXY_BIN=str(proxy_bin()), HF_HOME=str(cwd / "hf"),
               HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, str(EVALUATE), *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"evaluate.py {args[0]} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    return result


@pytest.fixture
def root_state():
    """Removes what SWE-ReX's local runtime leaves under /root, unless it was there before."""
    left = [Path("/root") / n for n in ("tools", "state.json", "model.patch", ".swe-agent-env")]
    before = {p for p in left if p.exists()}
    yield
    for p in left:
        if p not in before and p.exists():
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def test_swe_agent_batch_runs_on_a_local_dataset(tmp_path, root_state):
    dataset = tmp_path / "dataset"
    evaluate("dataset", "--instances", "slugify,paginate", "--out", str(dataset), cwd=tmp_path)

    err = tmp_path / "fake.err"
    fake = subprocess.Popen([str(fake_backend_bin()), "--port", "0", "agent", "--script",
                             str(REPO / "examples" / "evaluate" / "stage2.json")],
                            stdout=subprocess.PIPE, stderr=err.open("wb"), stdin=subprocess.DEVNULL)
    try:
        line = fake.stdout.readline().decode()
        assert line.startswith("PORT "), (line, err.read_text())
        url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        out = tmp_path / "results"
        run = ("run", "--scaffold", "swe-agent", "--python", SWE_PYTHON, "--dataset", str(dataset),
               "--checkpoint", f"stage2={url}", "--runs", "2", "--workers", "2", "--out", str(out))
        evaluate(*run, cwd=tmp_path)

        # SWE-agent's own output: per run, preds.json (instance_id -> prediction) and exit statuses.
        for r in range(2):
            run_dir = out / "stage2" / f"run-{r}"
            preds = json.loads((run_dir / "preds.json").read_text())
            assert sorted(preds) == ["paginate", "slugify"], (run_dir / "batch.log").read_text()[-4000:]
            assert (run_dir / "slugify" / "slugify.traj").is_file()
            assert "submitted" in (run_dir / "run_batch_exit_statuses.yaml").read_text()

        # The proxy's traces: SWE-agent's tools seen as the swe-agent profile, runs from X-ASAP-Run.
        sessions = [json.loads(f.read_text().splitlines()[0])["data"]
                    for f in sorted((out / "stage2" / "logs").glob("*.jsonl"))]
        assert sorted((s["instance_id"], s["run"]) for s in sessions) == [
            ("paginate", 0), ("paginate", 1), ("slugify", 0), ("slugify", 1)], sessions
        assert {s["profile"] for s in sessions} == {"swe-agent"}
        assert {s["run_source"] for s in sessions} == {"header"}

        # Predictions: the perl edits through SWE-agent's bash tool, submitted with `submit`.
        preds = {}
        for r in range(2):
            for row in map(json.loads, (out / "stage2" / "predictions" / f"run-{r}.jsonl").read_text().splitlines()):
                preds[row["instance_id"], r] = row["model_patch"]
        assert "+    return (total + per_page - 1) // per_page" in preds["paginate", 0]
        assert "+    return (total + per_page - 1) // per_page" in preds["paginate", 1]
        assert '+    return "-".join(text.split())' in preds["slugify", 0]
        assert preds["slugify", 1] == ""

        # The local judge, then the report over both runs.
        judged = [json.loads((out / "stage2" / "judge" / f"stage2.run{r}.json").read_text()) for r in range(2)]
        assert sorted(judged[0]["resolved_ids"]) == ["paginate", "slugify"]
        assert judged[1]["resolved_ids"] == ["paginate"]
        assert judged[1]["empty_patch_ids"] == ["slugify"]
        report = (out / "report.md").read_text()
        assert "stage2" in report and "| resolved |" in report

        # Resumed: everything is done, nothing runs again.
        again = evaluate(*run, cwd=tmp_path)
        assert "all 2 runs of 2 instances already done" in again.stderr
    finally:
        stop_process(fake)

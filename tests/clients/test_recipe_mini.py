"""docs/recipes.md's mini-swe-agent recipes, run as written against the fake backend.

The real `mini` command line (mini-swe-agent 2.4.6 from this suite's venv) is pointed at the
proxy with `OPENAI_API_BASE`, in text mode (`--model-class litellm_textbased -c
mini_textbased.yaml`: no tools, one ```mswea_bash_command block per reply) and in tool mode
(`-c mini.yaml`: one `bash` tool). The scripted model writes a file, then submits; mini must
run the command, end with `Submitted`, and the proxy must have traced one session in the
expected profile. If this test breaks, the recipe in docs/recipes.md is wrong too.

mini-swe-agent 1.x (1.17.5, installed by run.sh into its own folder, ASAP_MINI1_PATH) runs
the same script in its default text mode (`mini.yaml`: one ```bash block per reply): the
proxy must answer in 1.x's block form, so no turn is a format error, and the completion
command must end the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = ["I'll create the note.\n\n<bash>echo hi > note.txt</bash>", "Done.\n\n<submit/>"]
MINI = Path(sys.executable).with_name("mini")


def read_traces(log_dir: Path) -> list[list[dict]]:
    return [[json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            for f in sorted(log_dir.glob("*.jsonl"))]


MINI1_PATH = os.environ.get("ASAP_MINI1_PATH")


@pytest.mark.parametrize(
    ("mode", "args", "profile"),
    [
        ("text", ["--model-class", "litellm_textbased", "-c", "mini_textbased.yaml"],
         "mini-swe-agent-text"),
        ("tool", ["-c", "mini.yaml"], "mini-swe-agent"),
        ("text-v1", [], "mini-swe-agent-text"),
    ],
)
def test_mini_recipe(start_stack, tmp_path, mode, args, profile):
    if mode == "text-v1" and not MINI1_PATH:
        pytest.skip("mini-swe-agent 1.x not installed (tests/clients/run.sh sets ASAP_MINI1_PATH)")
    stack = start_stack(SCRIPT)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(
        os.environ,
        OPENAI_API_BASE=stack.base_url,
        OPENAI_API_KEY="dummy",
        MSWEA_COST_TRACKING="ignore_errors",
        MSWEA_CONFIGURED="true",
        MSWEA_GLOBAL_CONFIG_DIR=str(tmp_path / "mswea-config"),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    traj = tmp_path / "traj.json"
    if mode == "text-v1":
        # 1.x's `mini` takes one config file and no overrides; a wrong block form would
        # loop on format errors, which the api_calls check below catches.
        env["PYTHONPATH"] = MINI1_PATH
        command = [sys.executable, "-m", "minisweagent.run.mini", "-m", "openai/base-model"]
    else:
        command = [str(MINI), "-m", "openai/base-model", *args, "-c", "agent.step_limit=10"]
    result = subprocess.run(
        [*command, "-t", "Write hi into note.txt", "-y", "--exit-immediately", "-o", str(traj)],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, f"mini failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    info = json.loads(traj.read_text())["info"]
    assert info["exit_status"] == "Submitted", info
    assert info["mini_version"].startswith("1." if mode == "text-v1" else "2."), info
    assert info["model_stats"]["api_calls"] == 2, info
    assert (work / "note.txt").read_text() == "hi\n"

    traces = read_traces(stack.log_dir)
    assert len(traces) == 1, f"expected one session, got {len(traces)}"
    records = traces[0]
    assert records[0]["type"] == "session"
    steps = [r for r in records if r["type"] == "step"]
    assert [s["data"]["profile"] for s in steps] == [profile, profile]
    assert not [r for r in records if r["type"] in ("nudge", "terminate")], records
    assert len(stack.completion_requests()) == 2

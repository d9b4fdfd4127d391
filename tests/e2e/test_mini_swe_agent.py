"""The real mini-swe-agent (v2, tool-calling mode, local environment) through the proxy against
the real base model, via scripts/run_mini.py (mini's own `mini.yaml` config, `DefaultAgent`,
`LitellmModel`, `LocalEnvironment`) with a small step limit on a fresh copy of the task.

A 270M base model rarely produces a valid action, so this does not ask for a fix: it asks that
mini ran to one of its own ends without a proxy error, that every model call mini made is one
complete step record, and that every reply was in mini's dialect: exactly one `bash` tool call
with a string `command` (which mini ran), or no tool call at all (mini's "No tool calls found"
format error). The trajectory and the trace must tell the same story, call for call.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import check_trace_complete

REPO = Path(__file__).resolve().parents[2]
STEP_LIMIT = 4
MAX_TOKENS = 256  # mini's model_kwargs: keeps each call to a few seconds on 2 CPU cores
MINI_END_STATUSES = {"Submitted", "LimitsExceeded", "RepeatedFormatError", "TimeExceeded"}
SENTINEL = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# What the proxy sends for <submit/>: the sentinel, then the repository's patch (mini submits the
# output after the sentinel's line; profiles/mini-swe-agent.toml).
SUBMIT_COMMAND = SENTINEL + " && { git add -A && git diff --cached --binary; } 2>/dev/null || true"


def run_mini(base_url, task_repo, output):
    env = dict(os.environ, MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT="1", MSWEA_COST_TRACKING="ignore_errors",
               LITELLM_LOCAL_MODEL_COST_MAP="True", MSWEA_GLOBAL_CONFIG_DIR=str(output.parent / "mswea-config"))
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run_mini.py"), "--base-url", base_url,
         "--task-dir", str(task_repo), "--task-file", str(task_repo / "TASK.md"),
         "--step-limit", str(STEP_LIMIT), "--max-tokens", str(MAX_TOKENS), "--output", str(output)],
        capture_output=True, text=True, timeout=300, env=env,
    )


def model_calls_from_trajectory(traj):
    """Per model call, in order: the command of its bash tool call (with the call id), or None
    for a reply mini rejected as a format error."""
    calls = []
    for m in traj["messages"]:
        extra = m.get("extra") or {}
        if m["role"] == "assistant":
            tool_calls = m.get("tool_calls") or []
            assert len(tool_calls) == 1, f"expected exactly one tool call: {m}"
            tc = tool_calls[0]
            assert tc["function"]["name"] == "bash", tc
            args = json.loads(tc["function"]["arguments"])
            assert set(args) == {"command"} and isinstance(args["command"], str), args
            assert extra["actions"] == [{"command": args["command"], "tool_call_id": tc["id"]}]
            calls.append((tc["id"], args["command"]))
        elif extra.get("interrupt_type") == "FormatError":
            # Only "no tool call" is allowed: never a tool call mini cannot use.
            for bad in ("Unknown tool", "Missing 'command'", "Error parsing tool call arguments"):
                assert bad not in m["content"], m["content"]
            response = extra["response"]
            assert not response["choices"][0]["message"].get("tool_calls"), response
            calls.append(None)
    return calls


def test_mini_swe_agent_on_real_model(proxy, task_repo, tmp_path):
    traj_path = tmp_path / "mini.traj.json"
    result = run_mini(proxy.base_url, task_repo, traj_path)
    print(result.stderr[-4000:])  # mini's per-step progress, shown when the test fails
    assert result.returncode == 0, f"mini-swe-agent crashed:\n{result.stdout}\n{result.stderr[-4000:]}"

    traj = json.loads(traj_path.read_text())
    status = traj["info"]["exit_status"]
    assert status in MINI_END_STATUSES, status
    n_calls = traj["info"]["model_stats"]["api_calls"]
    assert 1 <= n_calls <= STEP_LIMIT
    calls = model_calls_from_trajectory(traj)
    assert len(calls) == n_calls, (calls, n_calls)
    if status == "LimitsExceeded":
        assert n_calls == STEP_LIMIT
    if status == "RepeatedFormatError":
        assert calls[-3:] == [None] * 3
    if status == "Submitted":
        # The proxy's submit, or the sentinel as the model wrote it.
        assert calls[-1] is not None and calls[-1][1].strip().startswith(SENTINEL), calls[-1]

    steps = check_trace_complete(proxy, min_steps=1)
    assert len(steps) == n_calls, f"{len(steps)} step records for {n_calls} model calls"
    for records in proxy.traces().values():
        assert records[0]["data"]["profile"] == "mini-swe-agent", records[0]
    steps.sort(key=lambda d: d["time_ms"])
    from_trace = []
    for d in steps:
        assert d["stream"] is False
        tc = d["response"]["tool_call"]
        if tc is None:
            assert d["parse"]["error"] is not None, d["parse"]
            assert d["response"]["finish_reason"] in {"stop", "length"}
            from_trace.append(None)
        else:
            assert d["response"]["finish_reason"] == "tool_calls"
            assert tc["function"]["name"] == "bash", tc
            args = json.loads(tc["function"]["arguments"])
            assert isinstance(args.get("command"), str), args
            action = d["parse"]["action"]
            if action["kind"] == "submit" or d["decision"] == "terminate":
                # A submit, or the proxy ending the run: mini's completion command.
                assert args["command"] == SUBMIT_COMMAND, (d["decision"], args)
            else:
                assert action["tag"] == "bash" and action["arguments"]["command"] == args["command"], action
            from_trace.append((tc["id"], args["command"]))
    assert from_trace == calls, "trace and mini's trajectory disagree"

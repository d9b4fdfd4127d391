"""The real OpenHands SDK (openhands-sdk + openhands-tools) driven through asap-proxy.

Two tests, both with a real `openhands.sdk.Agent` (the standard tools of openhands-tools:
terminal, file_editor, task_tracker, plus the SDK's built-in finish and think), a local
workspace on a fresh checkout of the bundled slugify task, no confirmation policy, no
condenser, no visualizer, no persistence:

* `test_openhands_sdk_real_model` runs it against the real small base model (ASAP_E2E_BACKEND)
  with a 3-iteration cap. A 270M base model rarely writes a valid action, so the test asserts
  the plumbing, not the fix: the conversation reached one of the SDK's own ends, every LLM call
  of the SDK is one complete step record of the proxy, and every reply was in OpenHands'
  dialect.
* `test_openhands_sdk_fixes_bug_with_scripted_model` runs it against the scripted fake backend
  (the `fake-backend` binary) whose continuations read the file, fix it with the SDK's own
  file_editor, run the tests and submit: the file is really fixed, the tests pass, and the
  conversation finished through the finish tool.

How the SDK ends a run (openhands-sdk 1.58.2, `LocalConversation._run` and
`agent/response_dispatch.py`):
* a reply with tool calls runs them and the loop goes on; a `finish` call sets FINISHED;
* a reply with non-blank content and no tool call is the agent's final message: status
  FINISHED (the SDK then waits for the user) -- this is what happens when the base model
  writes no valid action and the proxy answers with content only;
* an empty reply gets a corrective user message and the loop goes on;
* a repeated action/error pattern sets STUCK;
* reaching max_iteration_per_run sets ERROR and emits one ConversationErrorEvent with code
  "MaxIterationsReached" (no exception); any other failure (e.g. an HTTP error from the proxy)
  also sets ERROR but `run()` raises ConversationRunError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TASK_TEMPLATE, Proxy, check_trace_complete

os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")

from openhands.sdk import LLM, Agent, Conversation, TextContent, Tool  # noqa: E402
from openhands.sdk.conversation.state import ConversationExecutionStatus  # noqa: E402
from openhands.sdk.event import (  # noqa: E402
    ActionEvent, AgentErrorEvent, MessageEvent, ObservationEvent)
from openhands.sdk.event.conversation_error import ConversationErrorEvent  # noqa: E402
from openhands.tools.preset.default import get_default_tools  # noqa: E402

# The fake completion backend (the `fake-backend` workspace crate; scripts/e2e.sh builds it).
FAKE_BACKEND = Path(os.environ.get("ASAP_FAKE_BACKEND_BIN") or REPO / "target" / "debug" / "fake-backend")
TASK_TEXT = (TASK_TEMPLATE / "TASK.md").read_text()
OPENHANDS_TOOLS = {"terminal", "file_editor", "task_tracker", "finish", "think"}
MAX_ITERATIONS = 3
MAX_OUTPUT_TOKENS = 256

# Tracing/telemetry of the SDK is switched on only by these variables; keep it off.
_TELEMETRY_ENV = ("LMNR_PROJECT_API_KEY", "OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_ENDPOINT")


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch):
    for name in _TELEMETRY_ENV:
        monkeypatch.delenv(name, raising=False)


def run_agent(base_url: str, workspace: Path, max_iterations: int):
    """Run one OpenHands conversation on the task; returns (conversation, events, error)."""
    llm = LLM(
        model="openai/base-model",
        base_url=base_url,
        api_key="dummy",
        usage_id="agent",
        # One proxy request per SDK LLM call: a failure must surface, not be retried.
        num_retries=0,
        timeout=300,
        # Sent as max_completion_tokens; the proxy honours it. Keeps a 2-core CPU run short
        # (the proxy's default is 1024 and a base model often rambles to the limit).
        max_output_tokens=MAX_OUTPUT_TOKENS,
    )
    # The standard tool set of openhands-tools (get_default_agent's, without the browser);
    # finish and think are the SDK's built-in default tools. No condenser. The terminal (tmux
    # when installed, else the SDK's subprocess terminal) gives up on a command that prints
    # nothing new after 10 s instead of 30 s: a base model may well run `cat` or `python3`.
    tools = [Tool(name=t.name, params={**t.params, "no_change_timeout_seconds": 10})
             if t.name == "terminal" else t
             for t in get_default_tools(enable_browser=False)]
    assert [t.name for t in tools] == ["terminal", "file_editor", "task_tracker"], tools
    agent = Agent(llm=llm, tools=tools)
    events = []
    conversation = Conversation(
        agent=agent,
        workspace=str(workspace),
        callbacks=[events.append],
        max_iteration_per_run=max_iterations,
        visualizer=None,
    )
    error = None
    try:
        conversation.send_message(TASK_TEXT)
        conversation.run()
    except Exception as e:  # noqa: BLE001 -- reported by the caller's assertion
        error = e
    return conversation, events, error


def llm_call_count(conversation) -> int:
    """LLM calls the SDK made, by its own metrics (one response latency per call)."""
    metrics = conversation.conversation_stats.get_combined_metrics()
    return len(metrics.response_latencies)


def llm_response_ids(events) -> set[str]:
    """Distinct LLM responses that produced an event (action, agent error or message)."""
    return {e.llm_response_id for e in events if getattr(e, "llm_response_id", None)}


def agent_turns(events):
    """The SDK events made from LLM replies: actions, tool errors and agent messages."""
    return [e for e in events if isinstance(e, (ActionEvent, AgentErrorEvent))
            or (isinstance(e, MessageEvent) and e.source == "agent")]


def message_text(event) -> str:
    return "".join(c.text for c in event.llm_message.content if isinstance(c, TextContent))


def assert_dialect(steps, events):
    """Every proxy reply is an OpenHands tool call (known tool, JSON-object arguments) or
    content; every action the SDK built from them names a known tool."""
    for d in steps:
        response = d["response"]
        call = response["tool_call"]
        if call is not None:
            assert call["function"]["name"] in OPENHANDS_TOOLS, call
            args = json.loads(call["function"]["arguments"])
            assert isinstance(args, dict), call
            # openhands-sdk requires security_risk where the tool declares it; the proxy fills
            # it with the profile's default.
            assert args.get("security_risk", "LOW") == "LOW", call
            assert response["finish_reason"] == "tool_calls", response
        else:
            assert response["finish_reason"] in {"stop", "length"}, response
    for e in events:
        if isinstance(e, (ActionEvent, AgentErrorEvent)):
            assert e.tool_name in OPENHANDS_TOOLS, e.tool_name


def assert_sdk_took_every_reply(steps, events):
    """Each tool call the proxy sent became an SDK ActionEvent with that call id, tool name and
    the reply's content as its thought (the SDK emits one even when the call then fails)."""
    actions = {e.tool_call_id: e for e in events if isinstance(e, ActionEvent)}
    for d in steps:
        call = d["response"]["tool_call"]
        if call is None:
            continue
        assert call["id"] in actions, (call, sorted(actions))
        action = actions[call["id"]]
        assert action.tool_name == call["function"]["name"], (action.tool_name, call)
        thought = "".join(c.text for c in action.thought)
        assert thought == (d["response"]["content"] or ""), (thought, d["response"]["content"])


def chronological(steps):
    return sorted(steps, key=lambda d: d["time_ms"])


def assert_profile(proxy, steps):
    """The proxy recognised the scaffold: every session and every step is `openhands-sdk`."""
    for name, records in proxy.traces().items():
        assert records[0]["data"]["profile"] == "openhands-sdk", (name, records[0]["data"])
    for d in steps:
        assert d["profile"] == "openhands-sdk", (d["session"], d["step"], d["profile"])


def describe(conversation, events) -> str:
    lines = [f"status={conversation.state.execution_status}"]
    for e in events:
        lines.append(f"  {type(e).__name__}: {str(e)[:300]!r}")
    return "\n".join(lines)


def test_openhands_sdk_real_model(proxy, task_repo):
    conversation, events, error = run_agent(proxy.base_url, task_repo, MAX_ITERATIONS)
    try:
        info = describe(conversation, events)
        assert error is None, f"conversation raised {error!r}\n{info}"
        status = conversation.state.execution_status
        errors = [e for e in events if isinstance(e, ConversationErrorEvent)]
        # The conversation reached one of its own ends.
        if status == ConversationExecutionStatus.ERROR:
            assert [e.code for e in errors] == ["MaxIterationsReached"], info
        else:
            assert status in (ConversationExecutionStatus.FINISHED, ConversationExecutionStatus.STUCK), info
            assert not errors, info

        # (Not asserted here: one proxy session per conversation. After an empty reply, which
        # the SDK answers with a corrective user message, the proxy opens a new session.)
        steps = chronological(check_trace_complete(proxy, min_steps=1))
        assert_profile(proxy, steps)
        assert_dialect(steps, events)
        assert_sdk_took_every_reply(steps, events)

        calls = llm_call_count(conversation)
        assert calls == len(steps), f"SDK made {calls} LLM calls, proxy logged {len(steps)} steps\n{info}"
        assert len(llm_response_ids(events)) == calls, info
        assert 1 <= calls <= MAX_ITERATIONS, info
        if status == ConversationExecutionStatus.ERROR:
            assert calls == MAX_ITERATIONS, info
        if status == ConversationExecutionStatus.FINISHED:
            # Finished through the finish tool, or by a final message without a tool call
            # (content-only reply, e.g. when the model wrote no valid action).
            last = steps[-1]["response"]
            if last["tool_call"] is not None:
                assert last["tool_call"]["function"]["name"] == "finish", info
            else:
                final = agent_turns(events)[-1]
                assert isinstance(final, MessageEvent), info
                assert message_text(final) == last["content"], info
        print(f"\nopenhands-sdk real model: status={status.value} llm_calls={calls} "
              f"actions={[e.tool_name for e in events if isinstance(e, ActionEvent)]} "
              f"parse={[(d['parse']['error'] or {}).get('class', 'ok') for d in steps]}")
    finally:
        conversation.close()


# --- the happy path with a scripted model --------------------------------------------------


def start_fake_backend(tmp_path: Path, script: list):
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script))
    record = tmp_path / "backend-requests.jsonl"
    proc = subprocess.Popen(
        [str(FAKE_BACKEND), "--port", "0", "script", "--script", str(script_path),
         "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline().strip()
    if not line.startswith("PORT "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fake backend did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1", record


def stop_process(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def unittest_in(repo: Path):
    return subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=repo,
                          capture_output=True, text=True, timeout=60)


def test_openhands_sdk_fixes_bug_with_scripted_model(tmp_path, task_repo):
    slug = task_repo / "textutil" / "slug.py"
    before = slug.read_text()
    old = '    return text.replace(" ", "-")'
    new = '    return "-".join(text.split())'
    assert before.count(old) == 1
    assert unittest_in(task_repo).returncode != 0, "the bundled task must start with a failing test"
    script = [
        "Read the file.\n\n<bash>cat textutil/slug.py</bash>\n",
        "Runs of spaces become several dashes: join the words instead.\n\n"
        "<str_replace_editor>\n<command>str_replace</command>\n"
        f"<path>{slug}</path>\n<old_str>{old}</old_str>\n<new_str>{new}</new_str>\n"
        "</str_replace_editor>\n",
        "Run the tests.\n\n<bash>python3 -m unittest -q</bash>\n",
        "Fixed.\n\n<submit/>\n",
    ]
    backend, backend_url, record = start_fake_backend(tmp_path, script)
    proxy = None
    conversation = None
    try:
        proxy = Proxy(backend_url, tmp_path / "logs")
        conversation, events, error = run_agent(proxy.base_url, task_repo, max_iterations=10)
        info = describe(conversation, events)
        assert error is None, f"conversation raised {error!r}\n{info}"
        assert conversation.state.execution_status == ConversationExecutionStatus.FINISHED, info
        assert not [e for e in events if isinstance(e, ConversationErrorEvent)], info

        actions = [e for e in events if isinstance(e, ActionEvent)]
        assert [a.tool_name for a in actions] == ["terminal", "file_editor", "terminal", "finish"], info
        assert actions[0].action.command == "cat textutil/slug.py"
        assert actions[1].action.command == "str_replace" and actions[1].action.path == str(slug)
        assert actions[2].action.command == "python3 -m unittest -q"
        assert actions[3].action.message == "Fixed.", actions[3].action
        # The thought before each action reached the SDK as the action's thought.
        assert [a.thought[0].text for a in actions] == [
            "Read the file.", "Runs of spaces become several dashes: join the words instead.",
            "Run the tests.", "Fixed."]
        # (The SDK itself records UNKNOWN risk: it ignores security_risk without an analyzer.)

        # The SDK's tools really ran: the terminal ran both commands (the unit tests passed in
        # it), the editor fixed the file. (Exit codes, not the printed text: under CPU load
        # the tmux terminal of openhands-tools 1.58.2 now and then captures a fast command's
        # output as empty, about 1 run in 7 on 2 busy cores.)
        observations = {e.action_id: e.observation for e in events if isinstance(e, ObservationEvent)}
        cat, edit, unit = (observations[a.id] for a in actions[:3])
        assert cat.exit_code == 0 and not cat.is_error, cat
        if cat.text.strip():
            assert "text.replace" in cat.text, cat
        assert not edit.is_error, edit
        assert slug.read_text() == before.replace(old, new)
        assert unit.exit_code == 0 and not unit.is_error, unit
        tests = unittest_in(task_repo)
        assert tests.returncode == 0, tests.stderr

        # One proxy step and one backend request per SDK LLM call, all in OpenHands' dialect.
        steps = chronological(check_trace_complete(proxy, min_steps=4))
        assert len(proxy.traces()) == 1, "one conversation must stay one proxy session"
        assert_profile(proxy, steps)
        assert_dialect(steps, events)
        assert_sdk_took_every_reply(steps, events)
        assert len(steps) == 4 == llm_call_count(conversation) == len(llm_response_ids(events))
        assert len(record.read_text().splitlines()) == 4
        calls = [d["response"]["tool_call"]["function"] for d in steps]
        assert [c["name"] for c in calls] == ["terminal", "file_editor", "terminal", "finish"]
        for c in calls[:3]:
            assert json.loads(c["arguments"])["security_risk"] == "LOW", c
    finally:
        if conversation is not None:
            conversation.close()
        if proxy is not None:
            proxy.stop()
        stop_process(backend)

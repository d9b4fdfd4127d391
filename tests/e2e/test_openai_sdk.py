"""The `openai` SDK driving a tool loop through the proxy against the real base model.

The test plays a minimal scaffold with SWE-agent's tools: it runs each `bash` call in the task
repository, answers a reply without a tool call with a format-error message, and stops at
`submit` or after MAX_TURNS. Half of the turns stream (assembled by the SDK's own
accumulator), so both paths meet real base-model text.
"""

import json
import re
import subprocess
from pathlib import Path

from openai import LengthFinishReasonError, OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState

from conftest import check_trace_complete

REPO = Path(__file__).resolve().parents[2]
MAX_TURNS = 4
ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def first_request():
    return json.loads((REPO / "tests/fixtures/requests/swe-agent-1.json").read_text())


def run_bash(command, cwd):
    try:
        out = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=10)
        return (out.stdout + out.stderr)[-2000:] or "(no output)"
    except subprocess.TimeoutExpired:
        return "(timed out after 10 s)"


def test_openai_sdk_tool_loop_on_real_model(proxy, task_repo):
    client = OpenAI(base_url=proxy.base_url, api_key="dummy", max_retries=0, timeout=300)
    request = first_request()
    messages = request["messages"]
    tools = request["tools"]
    tool_names = {t["function"]["name"] for t in tools}
    replies = []
    for turn in range(MAX_TURNS):
        kwargs = dict(model="base-model", messages=messages, tools=tools, temperature=0.7, seed=turn, max_tokens=128)
        if turn % 2:
            state = ChatCompletionStreamState()
            for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
                state.handle_chunk(chunk)
            try:
                completion = state.get_final_completion()
            except LengthFinishReasonError as e:
                # The SDK's accumulator refuses a reply cut by max_tokens; the reply itself is
                # on the exception (a base model runs into the limit now and then).
                completion = e.completion
        else:
            completion = client.chat.completions.create(**kwargs)
        choice = completion.choices[0]
        message = choice.message
        replies.append(choice)
        assert choice.finish_reason in {"tool_calls", "stop", "length"}
        assistant = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            assert len(message.tool_calls) == 1
            call = message.tool_calls[0]
            assert ID.match(call.id), call.id
            assert call.function.name in tool_names
            args = json.loads(call.function.arguments)
            assistant["tool_calls"] = [call.model_dump()]
            messages.append(assistant)
            if call.function.name == "submit":
                break
            output = run_bash(args["command"], task_repo) if call.function.name == "bash" else "(editor not run in this test)"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        else:
            assert choice.finish_reason in {"stop", "length"}
            messages.append(assistant)
            messages.append({"role": "user", "content": "Your last output did not use any tool calls! Reply with exactly one action."})

    steps = check_trace_complete(proxy, min_steps=len(replies))
    assert len(steps) == len(replies), "one trace step per model call"
    for step, reply in zip(sorted(steps, key=lambda s: s["time_ms"]), replies):
        sent = step["response"]
        assert sent["finish_reason"] == reply.finish_reason
        if reply.message.tool_calls:
            assert sent["tool_call"]["id"] == reply.message.tool_calls[0].id
        else:
            assert sent["tool_call"] is None
    # All turns of the loop belong to one session, in one file.
    assert len(proxy.traces()) == 1, list(proxy.traces())

"""The official Anthropic Python SDK against the real proxy binary (`POST /v1/messages`).

The SWE-agent scenario (scenario.py) with its tools declared the Messages way
(`input_schema`): the SDK sends each turn, the test plays the scaffold and answers each
`tool_use` block with a `tool_result`. Non-streaming, streaming through the SDK's own event
accumulator (`messages.stream`), `count_tokens`, and a prompt too long for the context window
as the SDK's `BadRequestError`.
"""

from __future__ import annotations

import anthropic
import pytest

import scenario
from scenario import MODEL, STEPS, TOOLS

# The scenario's tools as the Messages API declares them.
MESSAGES_TOOLS = [
    {
        "name": t["function"]["name"],
        "description": t["function"].get("description", ""),
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS
]


def system_and_messages() -> tuple[str, list[dict]]:
    """The scenario's first request split the Messages way: system text apart."""
    system = []
    messages = []
    for m in scenario.first_messages():
        text = m["content"] if isinstance(m["content"], str) else "\n".join(
            p["text"] for p in m["content"] if p.get("type") == "text")
        if m["role"] == "system":
            system.append(text)
        else:
            messages.append({"role": m["role"], "content": [{"type": "text", "text": text}]})
    return "\n\n".join(system), messages


def client_for(stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.proxy_url, api_key="x", max_retries=0, timeout=60)


def check_turn(message, step) -> list[dict]:
    """Checks one reply against its scripted step; returns the tool results to send back."""
    assert message.role == "assistant"
    texts = [b.text for b in message.content if b.type == "text"]
    calls = [b for b in message.content if b.type == "tool_use"]
    assert texts == [step.thought], message
    assert len(calls) == 1, message
    assert calls[0].name == step.name
    assert calls[0].input == step.args
    assert message.stop_reason == "tool_use"
    assert calls[0].id.startswith("call_asap_")
    return [{"type": "tool_result", "tool_use_id": calls[0].id, "content": step.output}]


def run_loop(stack, stream: bool) -> None:
    client = client_for(stack)
    system, messages = system_and_messages()
    for step in STEPS:
        kwargs = dict(model=MODEL, max_tokens=1024, system=system, messages=messages,
                      tools=MESSAGES_TOOLS)
        if stream:
            with client.messages.stream(**kwargs) as s:
                texts = [event.text for event in s if event.type == "text"]
                message = s.get_final_message()
            assert "".join(texts) == step.thought
        else:
            message = client.messages.create(**kwargs)
        results = check_turn(message, step)
        messages = messages + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
            {"role": "user", "content": results},
        ]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_tool_loop(start_stack, stream):
    stack = start_stack(scenario.SCRIPT)
    run_loop(stack, stream)
    # One session for the whole loop: the session rode on the tool_use ids.
    traces = list(stack.log_dir.glob("*.jsonl"))
    assert len(traces) == 1, traces
    prompts = stack.prompts()
    assert len(prompts) == len(STEPS)
    assert "OBS-MARKER-3" in prompts[-1]


def test_count_tokens_and_a_prompt_too_long(start_stack):
    stack = start_stack(scenario.SCRIPT)
    system, messages = system_and_messages()
    counted = client_for(stack).messages.count_tokens(
        model=MODEL, system=system, messages=messages, tools=MESSAGES_TOOLS)
    assert counted.input_tokens > 100
    # Counting asks the model nothing: no completion request (the backend may be asked to
    # tokenize).
    assert [r for r in stack.backend_requests() if "max_tokens" in r] == []

    small = start_stack(scenario.SCRIPT, proxy_args=["--context-length", "256"])
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_for(small).messages.create(
            model=MODEL, max_tokens=64, system=system, messages=messages, tools=MESSAGES_TOOLS)
    assert caught.value.status_code == 400
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert body["error"]["message"].startswith("prompt is too long: "), body

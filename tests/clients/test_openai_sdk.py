"""The official OpenAI Python SDK against the real proxy binary."""

from __future__ import annotations

import json

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

import scenario
from conftest import raw_post
from scenario import MODEL, TOOLS, Reply, ToolCall


def client_for(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=60)


def tool_message(call_id: str, output: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def history_message(content, tool_calls: list[ToolCall]) -> dict:
    """The assistant message as SWE-agent re-sends it."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": tc.id, "type": tc.type, "function": {"name": tc.name, "arguments": tc.arguments}}
            for tc in tool_calls
        ],
    }


def to_reply(completion) -> Reply:
    assert len(completion.choices) == 1, completion
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    calls = [
        ToolCall(id=tc.id, type=tc.type, name=tc.function.name, arguments=tc.function.arguments)
        for tc in (choice.message.tool_calls or [])
    ]
    return Reply(
        content=choice.message.content,
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=completion.usage,
        history_message=history_message(choice.message.content, calls),
    )


def run_non_streaming(stack) -> list[Reply]:
    client = client_for(stack)

    def call(messages):
        completion = client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, temperature=0.0, top_p=1.0
        )
        assert completion.object == "chat.completion"
        return to_reply(completion)

    return scenario.run_loop(call, tool_message)


def run_streaming(stack) -> tuple[list[Reply], list[list]]:
    client = client_for(stack)
    all_chunks: list[list] = []

    def call(messages):
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, temperature=0.0, top_p=1.0,
            stream=True, stream_options={"include_usage": True},
        )
        state = ChatCompletionStreamState()
        chunks = []
        for chunk in stream:
            state.handle_chunk(chunk)
            chunks.append(chunk)
        all_chunks.append(chunks)
        return to_reply(state.get_final_completion())

    return scenario.run_loop(call, tool_message), all_chunks


def test_tool_loop_non_streaming(start_stack):
    stack = start_stack(scenario.SCRIPT)
    replies = run_non_streaming(stack)
    scenario.check_replies(replies)
    prompts = stack.prompts()
    scenario.check_prompts(prompts)
    # Token usage is the backend's, passed through (the fake counts words of the text it
    # returned: the scripted continuation cut at the request's first stop string).
    requests = stack.completion_requests()
    for i, (reply, prompt, step, req) in enumerate(
        zip(replies, prompts, scenario.STEPS, requests), start=1
    ):
        returned = scenario.returned_text(step.continuation, req.get("stop"))
        assert reply.usage is not None, f"turn {i}: no usage"
        assert reply.usage.prompt_tokens == len(prompt.split()), f"turn {i}: prompt_tokens"
        assert reply.usage.completion_tokens == len(returned.split()), f"turn {i}: completion_tokens"
        assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_tool_loop_streaming_matches_non_streaming(start_stack):
    expected = scenario.summary(run_non_streaming(start_stack(scenario.SCRIPT)))

    stack = start_stack(scenario.SCRIPT)
    replies, all_chunks = run_streaming(stack)
    scenario.check_replies(replies)
    assert scenario.summary(replies) == expected
    scenario.check_prompts(stack.prompts())

    for turn, chunks in enumerate(all_chunks, start=1):
        assert chunks, f"turn {turn}: empty stream"
        assert all(c.object == "chat.completion.chunk" for c in chunks), f"turn {turn}: chunk object"
        assert len({c.id for c in chunks}) == 1, f"turn {turn}: chunk ids differ"
        # include_usage: a final chunk with usage and no choices (OpenAI's contract).
        usage_chunks = [c for c in chunks if c.usage is not None]
        assert usage_chunks, f"turn {turn}: no usage chunk arrived"
        last = chunks[-1]
        assert last.usage is not None and last.choices == [], (
            f"turn {turn}: last chunk should carry usage with empty choices: {last!r}"
        )
        assert last.usage.prompt_tokens > 0 and last.usage.completion_tokens > 0
        assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
        # Clients that assemble deltas by hand (openhands-sdk) need id, type and
        # name in the first delta of each tool call.
        first_delta: dict[int, object] = {}
        for c in chunks:
            for choice in c.choices:
                for d in choice.delta.tool_calls or []:
                    first_delta.setdefault(d.index, d)
        assert sorted(first_delta) == [0], f"turn {turn}: tool call indexes {sorted(first_delta)}"
        d = first_delta[0]
        assert d.id and d.type == "function" and d.function and d.function.name, (
            f"turn {turn}: first tool-call delta lacks id/type/name: {d!r}"
        )
        finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
        assert finishes == ["tool_calls"], f"turn {turn}: finish reasons {finishes}"


def test_no_action_returns_plain_content(start_stack):
    text = "I am not sure what to do."
    stack = start_stack([text, scenario.SCRIPT[0]])
    client = client_for(stack)
    messages = scenario.first_messages()
    completion = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, temperature=0.0
    )
    choice = completion.choices[0]
    assert choice.message.content == text
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"

    # SWE-agent's answer to a reply without a tool call: re-send the content and
    # a format-error user message, then ask again. The loop must go on.
    retry = (
        "Your last output did not use any tool calls!\n"
        "Please make sure your output includes exactly _ONE_ function call!"
    )
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": retry}]
    completion = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, temperature=0.0
    )
    calls = completion.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "bash", completion
    assert json.loads(calls[0].function.arguments) == {"command": "ls -la"}
    prompts = stack.prompts()
    assert len(prompts) == 2
    assert prompts[1].startswith(prompts[0][: -len(scenario.THINKING_CUE)]), "not append-only"
    assert text in prompts[1][len(prompts[0]) - len(scenario.THINKING_CUE):]
    for line in retry.splitlines():
        assert line in prompts[1], f"retry message line {line!r} missing from the next prompt"


def test_malformed_body_is_openai_400(start_stack):
    stack = start_stack(["unused"])
    client = client_for(stack)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages="not a list", tools=TOOLS)
    err = info.value
    assert err.status_code == 400
    assert isinstance(err.body, dict), err.body
    assert isinstance(err.body.get("message"), str) and err.body["message"], err.body
    assert isinstance(err.body.get("type"), str) and err.body["type"], err.body

    # The same on the raw wire: an OpenAI error envelope, also for bad JSON.
    url = f"{stack.base_url}/chat/completions"
    for body in (
        json.dumps({"model": MODEL, "messages": {"role": "user"}}).encode(),
        b"{not json",
    ):
        status, payload = raw_post(url, body)
        assert status == 400, (body, status, payload)
        assert isinstance(payload, dict) and isinstance(payload.get("error"), dict), payload
        assert payload["error"].get("message") and payload["error"].get("type"), payload
    assert stack.completion_requests() == [], "a rejected request must not reach the backend"


def test_models_list(start_stack):
    stack = start_stack(["unused"])
    models = client_for(stack).models.list()
    ids = [m.id for m in models.data]
    assert ids and all(isinstance(i, str) and i for i in ids), ids


def test_backend_errors_become_openai_errors(start_stack):
    # A backend 5xx that persists: the proxy retries, then answers with an
    # OpenAI-shaped 5xx error, which the SDK raises as an APIStatusError.
    stack = start_stack([{"status": 500, "message": "backend exploded"}])
    client = client_for(stack)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=MODEL, messages=scenario.first_messages(), tools=TOOLS)
    err = info.value
    assert 500 <= err.status_code < 600, err.status_code
    assert isinstance(err.body, dict) and err.body.get("message") and err.body.get("type"), err.body
    assert len(stack.completion_requests()) >= 1

    # Streaming: the SDK must see an error (an error status, or an error event
    # in the stream), never a normal-looking end of stream.
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model=MODEL, messages=scenario.first_messages(), tools=TOOLS, stream=True
        ):
            pass

    # One transient 5xx is retried and the client sees a normal reply.
    stack = start_stack([{"status": 503, "message": "warming up"}, scenario.SCRIPT[0]])
    completion = client_for(stack).chat.completions.create(
        model=MODEL, messages=scenario.first_messages(), tools=TOOLS
    )
    call = completion.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("bash", {"command": "ls -la"})
    assert len(stack.completion_requests()) == 2

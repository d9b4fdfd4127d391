"""LiteLLM (``openai/`` provider, as SWE-agent and mini-swe-agent use it) against the proxy."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import litellm  # noqa: E402
import pytest  # noqa: E402

import scenario  # noqa: E402
from scenario import TOOLS, Reply, ToolCall  # noqa: E402

LITELLM_MODEL = "openai/base-model"


def tool_message(call_id: str, output: str) -> dict:
    """A tool result as SWE-agent sends it: text parts and a message-level cache_control."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": [{"type": "text", "text": output}],
        "cache_control": {"type": "ephemeral"},
    }


def to_reply(response) -> Reply:
    assert len(response.choices) == 1, response
    choice = response.choices[0]
    message = choice.message
    calls = [
        ToolCall(id=tc.id, type=tc.type, name=tc.function.name, arguments=tc.function.arguments)
        for tc in (message.tool_calls or [])
    ]
    # mini-swe-agent re-sends LiteLLM's message.model_dump() as the history entry.
    return Reply(
        content=message.content,
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=getattr(response, "usage", None),
        history_message=message.model_dump(),
    )


def completion(stack, messages, **kw):
    return litellm.completion(
        model=LITELLM_MODEL,
        api_base=stack.base_url,
        api_key="x",
        messages=messages,
        tools=TOOLS,
        temperature=0.0,
        num_retries=0,
        **kw,
    )


def run_non_streaming(stack) -> list[Reply]:
    return scenario.run_loop(lambda messages: to_reply(completion(stack, messages)), tool_message)


def run_streaming(stack) -> list[Reply]:
    def call(messages):
        chunks = list(completion(stack, messages, stream=True, stream_options={"include_usage": True}))
        assert chunks, "empty stream"
        built = litellm.stream_chunk_builder(chunks, messages=messages)
        assert built is not None, "stream_chunk_builder returned None"
        return to_reply(built)

    return scenario.run_loop(call, tool_message)


def test_litellm_tool_loop_non_streaming(start_stack):
    stack = start_stack(scenario.SCRIPT)
    replies = run_non_streaming(stack)
    scenario.check_replies(replies)
    scenario.check_prompts(stack.prompts())
    for i, reply in enumerate(replies, start=1):
        assert reply.usage is not None and reply.usage.prompt_tokens > 0, f"turn {i}: usage"


def test_litellm_tool_loop_streaming(start_stack):
    expected = scenario.summary(run_non_streaming(start_stack(scenario.SCRIPT)))

    stack = start_stack(scenario.SCRIPT)
    replies = run_streaming(stack)
    scenario.check_replies(replies)
    assert scenario.summary(replies) == expected
    scenario.check_prompts(stack.prompts())
    for i, reply in enumerate(replies, start=1):
        assert reply.usage is not None and reply.usage.completion_tokens > 0, f"turn {i}: usage"


def test_a_prompt_beyond_the_context_window_is_litellms_context_window_error(start_stack):
    """The proxy's 400 for a history that cannot fit is worded as OpenAI words it, so LiteLLM
    raises ContextWindowExceededError, which SWE-agent and mini-swe-agent handle as for any
    model (end the run or trim the history)."""
    stack = start_stack(scenario.SCRIPT, proxy_args=["--context-length", "2000"])
    messages = [dict(m) for m in scenario.REQUEST["messages"]]
    messages.append({"role": "user", "content": "log line\n" * 2000})
    try:
        completion(stack, messages)
    except litellm.ContextWindowExceededError as e:
        assert "maximum context length is 2000 tokens" in str(e)
    else:
        raise AssertionError("no ContextWindowExceededError")
    # Only the token count reached the backend (`/tokenize`, 404 here), never a completion.
    assert not [r for r in stack.completion_requests() if "stop" in r], "no completion call"


@pytest.mark.parametrize("backend", scenario.OVERFLOWS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_backends_own_context_overflow_is_litellms_context_window_error(start_stack, backend, stream):
    """When the backend itself refuses the prompt as longer than its context window (the
    proxy's count said it fits), the proxy answers OpenAI's 400 `context_length_exceeded` in
    OpenAI's wording at once, streamed or not, and LiteLLM raises ContextWindowExceededError."""
    stack = start_stack([{"overflow": backend}])
    messages = [dict(m) for m in scenario.REQUEST["messages"]]
    kw = {"stream": True} if stream else {}
    try:
        result = completion(stack, messages, **kw)
        if stream:
            list(result)
    except litellm.ContextWindowExceededError as e:
        assert e.status_code == 400
        assert "This model's maximum context length is" in str(e), str(e)
    else:
        raise AssertionError("no ContextWindowExceededError")
    calls = [r for r in stack.completion_requests() if "stop" in r]
    assert len(calls) == 1, f"one backend call, no retries: {len(calls)}"

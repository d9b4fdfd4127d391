"""The OpenAI SDK's Responses API (`client.responses`) against the real proxy binary: a
BrowseComp-Plus tool loop (search, get_document, final answer), non-streaming and streaming."""

from __future__ import annotations

import json

import openai
import pytest

from conftest import raw_post

TOOLS = [
    {
        "type": "function",
        "name": "search",
        "description": "Search the corpus. Returns the top hits with docids.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Search query"}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "strict": True,
    },
    {
        "type": "function",
        "name": "get_document",
        "description": "Fetch the full text of a document by its docid.",
        "parameters": {
            "type": "object",
            "properties": {"docid": {"type": "string", "description": "Document ID"}},
            "required": ["docid"],
            "additionalProperties": False,
        },
        "strict": True,
    },
]

SCRIPT = [
    "Search first.\n\n<search>\n<query>1931 fishing treaty</query>\n</search>\n",
    "<get_document>\n<docid>doc-4411</docid>\n</get_document>\n",
    "Found it.\n\n<submit>Explanation: [doc-4411]\nExact Answer: the Vell\nConfidence: 80%</submit>\n",
]
ANSWER = "Explanation: [doc-4411]\nExact Answer: the Vell\nConfidence: 80%"
OBSERVATIONS = {
    "search": "docid: doc-4411 score: 12.1 The 1931 treaty was signed in Riverton.",
    "get_document": "Riverton lies on the river Vell.",
}
QUESTION = "Question: which river flows through the town where the 1931 treaty was signed?"


def client_for(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=60)


def run_loop(stack, create) -> list:
    """The BrowseComp-Plus client loop: echo each response's output into `input`, answer each
    function_call with a function_call_output, until a response has no function call."""
    items: list = [{"role": "user", "content": QUESTION}]
    responses = []
    for _ in range(6):
        response = create(items)
        assert response.object == "response"
        assert response.status == "completed", response
        assert response.id.startswith("resp_")
        assert response.usage.input_tokens > 0
        assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
        responses.append(response)
        calls = [o for o in response.output if o.type == "function_call"]
        items += [o.model_dump(exclude_none=True) for o in response.output]
        if not calls:
            break
        for call in calls:
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": OBSERVATIONS[call.name]})
    return responses


def check_loop(stack, responses) -> None:
    assert len(responses) == 3, [r.output for r in responses]
    r1, r2, r3 = responses
    assert [o.type for o in r1.output] == ["message", "function_call"]
    assert r1.output[0].content[0].text == "Search first."
    assert r1.output_text == "Search first."
    fc1 = r1.output[1]
    assert fc1.name == "search"
    assert json.loads(fc1.arguments) == {"query": "1931 fishing treaty"}
    assert [o.type for o in r2.output] == ["function_call"]
    fc2 = r2.output[0]
    assert fc2.name == "get_document"
    assert json.loads(fc2.arguments) == {"docid": "doc-4411"}
    # call_ids carry the session: one trajectory, one session.
    assert fc1.call_id != fc2.call_id
    assert fc1.call_id.split("_")[2] == fc2.call_id.split("_")[2]
    assert [o.type for o in r3.output] == ["message"]
    assert r3.output_text == ANSWER
    prompts = stack.prompts()
    assert len(prompts) == 3
    assert OBSERVATIONS["get_document"] in prompts[2]
    assert len(list(stack.log_dir.glob("*.jsonl"))) == 1


def test_responses_tool_loop_non_streaming(start_stack):
    stack = start_stack(SCRIPT)
    client = client_for(stack)

    def create(items):
        return client.responses.create(
            model="base-model",
            instructions="You are a research agent.",
            input=items,
            tools=TOOLS,
            max_output_tokens=500,
            store=False,
        )

    check_loop(stack, run_loop(stack, create))
    assert stack.completion_requests()[0]["max_tokens"] == 500


def test_responses_tool_loop_streaming_create(start_stack):
    stack = start_stack(SCRIPT)
    client = client_for(stack)
    seen: list[list[str]] = []

    def create(items):
        events = list(client.responses.create(model="base-model", input=items, tools=TOOLS, stream=True))
        seen.append([e.type for e in events])
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].type == "response.created"
        assert events[-1].type == "response.completed"
        final = events[-1].response
        args = [e for e in events if e.type == "response.function_call_arguments.done"]
        calls = [o for o in final.output if o.type == "function_call"]
        assert [a.arguments for a in args] == [c.arguments for c in calls]
        return final

    check_loop(stack, run_loop(stack, create))
    assert seen[1] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_responses_tool_loop_stream_helper(start_stack):
    """`client.responses.stream(...)` accumulates the events itself: its final response must
    match the one the proxy sends in `response.completed`."""
    stack = start_stack(SCRIPT)
    client = client_for(stack)

    def create(items):
        with client.responses.stream(model="base-model", input=items, tools=TOOLS) as stream:
            deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
        assert deltas == final.output_text
        return final

    check_loop(stack, run_loop(stack, create))


def test_responses_bad_input_is_400(start_stack):
    stack = start_stack(SCRIPT)
    client = client_for(stack)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="base-model", input=[{"type": "function_call_output", "output": "x"}])
    assert e.value.body["param"] == "input[0].call_id"
    status, body = raw_post(f"{stack.base_url}/responses", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"

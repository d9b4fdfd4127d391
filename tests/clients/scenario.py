"""The SWE-agent-style tool loop shared by the client tests.

The test plays the scaffold: it sends the SWE-agent first request (tools bash,
str_replace_editor, submit), and after each reply appends the assistant message
and a ``tool`` message with fake output for the returned call id, then asks
again. The fake backend's script makes the "model" run ``ls``, view a file,
edit it, then submit (the edit comes before the submit so that no
submit-before-edit nudge is involved: this file tests the client wiring, not
the policy).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUEST = json.loads((HERE.parent / "fixtures" / "requests" / "swe-agent-1.json").read_text())
TOOLS: list = REQUEST["tools"]
MODEL = "base-model"
ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
THINKING_CUE = "## Thinking\n"


@dataclass(frozen=True)
class Step:
    thought: str   # what the reply's content must be
    action: str    # the action text the model writes after the thought
    name: str      # expected tool name
    args: dict     # expected json.loads(arguments)
    output: str    # fake tool output the scaffold sends back (none for submit)

    @property
    def continuation(self) -> str:
        """What the fake backend returns as choices[0].text."""
        return f"{self.thought}\n\n{self.action}\n"


STEPS = [
    Step(
        thought="I should look at the files first.",
        action="<bash>ls -la</bash>",
        name="bash",
        args={"command": "ls -la"},
        output="total 16\n-rw-r--r-- 1 root root  212 inventory.py\n-rw-r--r-- 1 root root  391 test_inventory.py\nOBS-MARKER-1\n",
    ),
    Step(
        thought="Let me view it.",
        action=(
            "<str_replace_editor>\n<command>view</command>\n"
            "<path>/testbed/inventory.py</path>\n</str_replace_editor>"
        ),
        name="str_replace_editor",
        args={"command": "view", "path": "/testbed/inventory.py"},
        output=(
            "Here's the result of running `cat -n` on /testbed/inventory.py:\n"
            "     1\tclass Inventory:\n"
            "     2\t    def total(self):\n"
            "     3\t        return sum(l.quantity for l in self.lines)\n"
            "OBS-MARKER-2\n"
        ),
    ),
    Step(
        thought="The total ignores the unit price; I will multiply by it.",
        action=(
            "<str_replace_editor>\n<command>str_replace</command>\n"
            "<path>/testbed/inventory.py</path>\n"
            "<old_str>return sum(l.quantity for l in self.lines)</old_str>\n"
            "<new_str>return sum(l.quantity * l.unit_price for l in self.lines)</new_str>\n"
            "</str_replace_editor>"
        ),
        name="str_replace_editor",
        args={
            "command": "str_replace",
            "path": "/testbed/inventory.py",
            "old_str": "return sum(l.quantity for l in self.lines)",
            "new_str": "return sum(l.quantity * l.unit_price for l in self.lines)",
        },
        output="The file /testbed/inventory.py has been edited. OBS-MARKER-3\n",
    ),
    Step(
        thought="All done.",
        action="<submit/>",
        name="submit",
        args={},
        output="",
    ),
]

SCRIPT = [s.continuation for s in STEPS]

# The backends whose context-overflow answer the fake backend plays (`{"overflow": name}`).
OVERFLOWS = ["llama-server", "llama-server-500", "sglang", "tgi", "vllm"]


def returned_text(text: str, stop) -> str:
    """What the fake backend returns for a scripted text: cut at the request's earliest stop
    string, as vLLM does by default."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str) and s]
    cuts = [text.find(s) for s in stops if s in text]
    return text[: min(cuts)] if cuts else text


def first_messages() -> list[dict]:
    """The SWE-agent first request's messages (a deep copy)."""
    return json.loads(json.dumps(REQUEST["messages"]))


@dataclass
class ToolCall:
    id: str
    type: str
    name: str
    arguments: str

    def parsed(self) -> dict:
        return json.loads(self.arguments)


@dataclass
class Reply:
    """One chat reply, reduced to what the scaffold uses, whatever the client."""

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: object | None = None
    history_message: dict = field(default_factory=dict)  # what the scaffold re-sends


def summary(replies: list[Reply]) -> list[tuple]:
    """Client-independent view of a loop, for comparing runs (ids excluded)."""
    return [
        (r.content, r.finish_reason, [(tc.type, tc.name, tc.parsed()) for tc in r.tool_calls])
        for r in replies
    ]


def run_loop(call, tool_message) -> list[Reply]:
    """Drive the loop: ``call(messages) -> Reply``; ``tool_message(id, output) -> dict``."""
    messages = first_messages()
    replies: list[Reply] = []
    for i, step in enumerate(STEPS):
        reply = call(messages)
        replies.append(reply)
        assert len(reply.tool_calls) == 1, (
            f"turn {i + 1}: expected exactly one tool call, got {reply.tool_calls!r} "
            f"(content={reply.content!r}, finish_reason={reply.finish_reason!r})"
        )
        messages.append(reply.history_message)
        if step.name != "submit":
            messages.append(tool_message(reply.tool_calls[0].id, step.output))
    return replies


def check_replies(replies: list[Reply]) -> None:
    """Exact tool names, arguments, content and finish reason per turn; id shape."""
    assert len(replies) == len(STEPS)
    for i, (reply, step) in enumerate(zip(replies, STEPS), start=1):
        tc = reply.tool_calls[0]
        assert tc.type == "function", f"turn {i}: {tc!r}"
        assert tc.name == step.name, f"turn {i}: tool name"
        assert isinstance(tc.arguments, str), f"turn {i}: arguments must be a JSON string"
        assert tc.parsed() == step.args, f"turn {i}: arguments {tc.arguments!r}"
        assert reply.content == step.thought, f"turn {i}: content {reply.content!r}"
        assert reply.finish_reason == "tool_calls", f"turn {i}: finish_reason"
        assert ID_RE.match(tc.id), f"turn {i}: tool call id {tc.id!r} does not match {ID_RE.pattern}"
    ids = [r.tool_calls[0].id for r in replies]
    assert len(set(ids)) == len(ids), f"tool call ids repeat: {ids}"


def check_prompts(prompts: list[str]) -> None:
    """One backend call per turn; each prompt extends the previous one (prefix cache)."""
    assert len(prompts) == len(STEPS), f"expected {len(STEPS)} backend calls, got {len(prompts)}"
    assert "Inventory.total()" in prompts[0], "task text missing from the first prompt"
    for i, prompt in enumerate(prompts):
        assert prompt.endswith(THINKING_CUE), (
            f"prompt {i + 1} does not end with {THINKING_CUE!r}: ...{prompt[-200:]!r}"
        )
    for i in range(1, len(prompts)):
        before = prompts[i - 1][: -len(THINKING_CUE)]
        assert prompts[i].startswith(before), (
            f"prompt {i + 1} does not start with prompt {i} minus the thinking cue "
            f"(first difference at char {first_difference(before, prompts[i])}):\n"
            f"prompt {i} tail: {before[-300:]!r}\nprompt {i + 1} there: "
            f"{prompts[i][max(0, first_difference(before, prompts[i]) - 100):][:300]!r}"
        )
        prev = STEPS[i - 1]
        assert prev.thought in prompts[i], f"turn {i} thought missing from prompt {i + 1}"
        # The observation may be re-indented or trimmed, but its lines must be there.
        for line in prev.output.strip().splitlines():
            assert line.strip() in prompts[i], (
                f"turn {i} tool output line {line!r} missing from prompt {i + 1}"
            )


def first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))

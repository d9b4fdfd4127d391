"""The replay backend through the real ``openai`` SDK: a session recorded against the
fake base model is re-run by a proxy started with ``--backend replay:DIR`` and no model
server at all, and every turn gets the identical tool call."""

from __future__ import annotations

import json

import openai
import pytest

import scenario
from scenario import MODEL, TOOLS
from test_openai_sdk import client_for, run_non_streaming, run_streaming


def test_replay_backend_reruns_a_recorded_session(start_stack):
    recording = start_stack(scenario.SCRIPT)
    recorded = run_non_streaming(recording)
    scenario.check_replies(recorded)
    recording.stop()  # the backend is gone: only the trace logs remain
    traces = sorted(recording.log_dir.glob("*.jsonl"))
    assert len(traces) == 1, traces

    replay = start_stack([], replay_from=recording.log_dir)
    assert replay.backend is None
    replayed = run_non_streaming(replay)
    scenario.check_replies(replayed)
    assert scenario.summary(replayed) == scenario.summary(recorded)
    ids = {r.tool_calls[0].id for r in recorded} | {r.tool_calls[0].id for r in replayed}
    assert len(ids) == 2 * len(recorded), "a replayed session mints its own ids"

    # Streaming clients get the same answers (the recorded prompts do not depend on it).
    streamed, _ = run_streaming(replay)
    assert scenario.summary(streamed) == scenario.summary(recorded)

    # replay:FILE works as well as a directory; GET /v1/models names the recorded model.
    single = start_stack([], replay_from=traces[0])
    assert scenario.summary(run_non_streaming(single)) == scenario.summary(recorded)
    assert [m.id for m in client_for(single).models.list().data] == ["fake-base"]


def test_replay_backend_unknown_prompt_is_a_clear_error(start_stack):
    recording = start_stack(scenario.SCRIPT)
    run_non_streaming(recording)
    recording.stop()
    replay = start_stack([], replay_from=recording.log_dir)
    messages = scenario.first_messages()
    messages[1] = {"role": "user", "content": "A task nobody recorded."}
    with pytest.raises(openai.InternalServerError) as info:
        client_for(replay).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    err = info.value
    assert err.status_code == 502
    assert err.body["code"] == "replay_miss", json.dumps(err.body)
    assert "prompt sha256 " in err.body["message"]
    assert f"none of the {len(scenario.STEPS)} recorded prompts" in err.body["message"]

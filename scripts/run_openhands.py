#!/usr/bin/env python3
"""Run the real OpenHands SDK agent on a task through an OpenAI-compatible endpoint, normally
asap-proxy. Same command line and output as scripts/run_mini.py, so scripts/ablation.py can
drive either scaffold:

    scripts/run_openhands.py --base-url http://127.0.0.1:8100/v1 --task-dir DIR \\
        --task-file DIR/TASK.md --step-limit 6 [--output events.json] [--header X-ASAP-Run:0]

Needs Python 3.12 with openhands-sdk and openhands-tools (the e2e venv). Uses the SDK's
`Agent` with the standard tools of openhands-tools (terminal, file_editor, task_tracker; the
SDK adds finish and think), a local workspace at the task directory, no condenser, no
confirmation, no visualizer; `max_iteration_per_run` = --step-limit. Prints
`exit_status: <the conversation's final status>` and `model_calls: N` on stdout; exits 0 when
the conversation reached one of its own ends, 1 when it raised.
"""

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--task-dir", required=True, type=Path)
    ap.add_argument("--task-file", required=True, type=Path)
    ap.add_argument("--step-limit", type=int, default=6, help="max_iteration_per_run")
    ap.add_argument("--output", type=Path, help="write the SDK's events (JSON list) here")
    ap.add_argument("--model", default="openai/base-model")
    ap.add_argument("--max-tokens", type=int, default=512, help="max_output_tokens per call")
    ap.add_argument("--command-timeout", type=int, default=30, help="terminal no-change timeout, s")
    ap.add_argument("--header", action="append", default=[], metavar="NAME:VALUE")
    args = ap.parse_args(argv)

    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    for name in ("LMNR_PROJECT_API_KEY", "OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_ENDPOINT"):
        os.environ.pop(name, None)
    try:
        from openhands.sdk import LLM, Agent, Conversation, Tool
        from openhands.tools.preset.default import get_default_tools
    except ImportError as e:
        print(f"run_openhands: openhands-sdk is not importable with {sys.executable} ({e})", file=sys.stderr)
        return 2

    headers = dict((h.split(":", 1)[0].strip(), h.split(":", 1)[1].strip()) for h in args.header)
    llm = LLM(model=args.model, base_url=args.base_url, api_key="dummy", usage_id="agent",
              num_retries=0, timeout=600, max_output_tokens=args.max_tokens,
              extra_headers=headers or None)
    tools = [Tool(name=t.name, params={**t.params, "no_change_timeout_seconds": args.command_timeout})
             if t.name == "terminal" else t
             for t in get_default_tools(enable_browser=False)]
    events = []
    conversation = Conversation(agent=Agent(llm=llm, tools=tools), workspace=str(args.task_dir.resolve()),
                                callbacks=[events.append], max_iteration_per_run=args.step_limit,
                                visualizer=None)
    rc = 0
    try:
        conversation.send_message(args.task_file.read_text())
        conversation.run()
    except Exception as e:  # the conversation did not reach its own end
        print(f"[openhands] raised {type(e).__name__}: {e}", file=sys.stderr)
        rc = 1
    status = conversation.state.execution_status
    calls = len(conversation.conversation_stats.get_combined_metrics().response_latencies)
    print(f"exit_status: {getattr(status, 'value', status)}" + (" (crash)" if rc else ""))
    print(f"model_calls: {calls}")
    if args.output:
        args.output.write_text(json.dumps([e.model_dump(mode="json") for e in events], default=str))
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Run the real mini-swe-agent (v2, tool-calling mode) on a task through an OpenAI-compatible
endpoint, normally asap-proxy.

    scripts/run_mini.py --base-url http://127.0.0.1:8100/v1 --task-dir DIR \
        --task-file DIR/TASK.md --step-limit 6 [--output traj.json]

Needs a Python with mini-swe-agent installed (scripts/venv.sh prints one). Uses mini's own
default tool-calling config (`mini.yaml`: system/instance templates, observation and format-error
templates), its `DefaultAgent` (no confirmation prompts), `LitellmModel` (one `bash` tool) with
model `openai/base-model`, api key `dummy`, cost tracking off (cost limit 0), and
`LocalEnvironment` with cwd = the task directory.

Prints one progress line per model call to stderr, then the exit status on stdout
(`exit_status: Submitted`, `LimitsExceeded`, `RepeatedFormatError`, ...). Exits 0 whenever the
agent reached its own end; 1 when it crashed (e.g. the endpoint failed), with the exception.
The endpoint is tried once per call (MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT, default here 1) so a
failing proxy shows at once instead of after minutes of retries.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path


def _setup_env():
    # Before importing minisweagent / litellm: these are read at import time.
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_CONFIGURED", "true")
    os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    # litellm must not fetch its price list from the internet.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # mini loads (and creates) a global config dir with a .env file; keep the user's out of it.
    if "MSWEA_GLOBAL_CONFIG_DIR" not in os.environ:
        os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = tempfile.mkdtemp(prefix="mswea-config-")


def _short(text, limit=100):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _log(line):
    print(line, file=sys.stderr, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="OpenAI base URL including /v1")
    ap.add_argument("--task-dir", required=True, type=Path, help="repository the agent works in (cwd)")
    ap.add_argument("--task-file", required=True, type=Path, help="file with the task text")
    ap.add_argument("--step-limit", type=int, default=6, help="model calls before LimitsExceeded")
    ap.add_argument("--output", type=Path, help="write mini's trajectory JSON here")
    ap.add_argument("--model", default="openai/base-model", help="model name sent (the proxy ignores it)")
    ap.add_argument("--max-tokens", type=int, help="max_tokens per model call (mini's model_kwargs); "
                    "default: none sent, so the proxy's own cap applies")
    ap.add_argument("--command-timeout", type=int, default=30, help="seconds per bash command")
    ap.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                    help="extra HTTP header on every model call (e.g. X-ASAP-Task:ID, X-ASAP-Run:3)")
    args = ap.parse_args(argv)

    _setup_env()
    try:
        import yaml  # noqa: F401  (a mini-swe-agent dependency)
        from minisweagent import __version__
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import get_config_from_spec
        from minisweagent.environments.local import LocalEnvironment
        from minisweagent.exceptions import FormatError, LimitsExceeded, Submitted
        from minisweagent.models.litellm_model import LitellmModel
    except ImportError as e:
        _log(f"run_mini: mini-swe-agent is not importable with {sys.executable} ({e}); "
             "use the venv from scripts/venv.sh")
        return 2

    import litellm

    litellm.suppress_debug_info = True  # no "Provider List" banners when cost lookup fails

    task_dir = args.task_dir.resolve()
    task = args.task_file.read_text()
    config = get_config_from_spec("mini.yaml")  # mini's own default tool-calling config

    agent_cfg = dict(config.get("agent", {}))
    for key in ("mode", "confirm_exit", "whitelist_actions", "agent_class"):  # InteractiveAgent only
        agent_cfg.pop(key, None)
    agent_cfg.update(step_limit=args.step_limit, cost_limit=0, output_path=args.output)

    model_cfg = dict(config.get("model", {}))
    model_cfg.pop("model_class", None)
    model_cfg["model_name"] = args.model
    model_cfg["cost_tracking"] = "ignore_errors"
    model_cfg["model_kwargs"] = {
        **model_cfg.get("model_kwargs", {}),
        "api_base": args.base_url,
        "api_key": "dummy",
    }
    if args.max_tokens:
        model_cfg["model_kwargs"]["max_tokens"] = args.max_tokens
    if args.header:
        model_cfg["model_kwargs"]["extra_headers"] = dict(
            (h.split(":", 1)[0].strip(), h.split(":", 1)[1].strip()) for h in args.header)

    env_cfg = dict(config.get("environment", {}))
    env_cfg.pop("environment_class", None)
    env_cfg.update(cwd=str(task_dir), timeout=args.command_timeout)

    class ProgressAgent(DefaultAgent):
        """DefaultAgent that reports every model call on stderr."""

        def step(self):
            started = time.monotonic()
            n = self.n_calls + 1
            try:
                message = self.query()
            except FormatError as e:
                took = time.monotonic() - started
                detail = e.messages[0].get("content", "")
                m = re.search(r"<error>\s*(.*?)\s*</error>", detail, re.S)
                first = m.group(1) if m else detail.strip().split("\n")[0]
                if "output token limit" in first:
                    first = "no tool call before the output token limit (finish_reason=length)"
                _log(f"[mini] step {n}: format error ({took:.1f} s): {_short(first, 90)}")
                raise
            except LimitsExceeded:
                _log(f"[mini] step limit reached after {self.n_calls} model calls")
                raise
            took = time.monotonic() - started
            for action in message.get("extra", {}).get("actions", []):
                _log(f"[mini] step {n}: $ {_short(action.get('command', ''), 90)}  ({took:.1f} s)")
            try:
                outputs = self.execute_actions(message)
            except Submitted:
                _log("[mini]         submitted")
                raise
            for out in outputs:
                raw = out.get("extra", {}).get("raw_output", "")
                rc = out.get("extra", {}).get("returncode")
                _log(f"[mini]         rc={rc} {_short(raw, 90) or '(no output)'}")
            return outputs

    model = LitellmModel(**model_cfg)
    env = LocalEnvironment(**env_cfg)
    agent = ProgressAgent(model, env, **agent_cfg)
    _log(f"[mini] mini-swe-agent {__version__}, model {args.model} at {args.base_url}, "
         f"cwd {task_dir}, step limit {args.step_limit}")
    try:
        result = agent.run(task)
    except Exception as e:  # the agent did not reach its own end
        _log(f"[mini] crashed after {agent.n_calls} model calls: {type(e).__name__}: {e}")
        print(f"exit_status: {type(e).__name__} (crash)")
        return 1
    status = result.get("exit_status", "")
    print(f"exit_status: {status}")
    print(f"model_calls: {agent.n_calls}")
    if args.output:
        print(f"trajectory: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Summarize asap-proxy trace logs: what the model did, step by step.

    scripts/summarize_trace.py LOG_DIR [--proxy-bin BIN] [--task-dir DIR --test-cmd "..."]

Reads the traces through the proxy's own code: it runs `asap-proxy report --format json
--steps LOG_DIR` (the report's reading: the same parse classes, nudges, terminations and
behaviour flags as `report` and the viewer) and prints each session with its profile and
ending, one line per completion call (its step, the parsed action or the parse-failure
class, and the nudge or termination decision), counts of parse failures by class, nudges,
terminations and proxy errors, and the trace file paths. With --task-dir it also shows what
changed in that git repository and whether its tests pass now (--test-cmd, run there).
The binary is --proxy-bin, else $ASAP_PROXY_BIN, else target/release/asap-proxy or
target/debug/asap-proxy of this checkout, else `asap-proxy` on PATH. Standard library only.
Exits 0 unless LOG_DIR is missing or the report cannot be made.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def short(text, limit=80):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def proxy_binary(given):
    if given:
        return str(given)
    if os.environ.get("ASAP_PROXY_BIN"):
        return os.environ["ASAP_PROXY_BIN"]
    for build in ("release", "debug"):
        path = REPO / "target" / build / "asap-proxy"
        if path.is_file():
            return str(path)
    return shutil.which("asap-proxy") or "asap-proxy"


def report_steps(binary, log_dir):
    """`asap-proxy report --format json --steps LOG_DIR` as a dict, or (None, error text)."""
    try:
        p = subprocess.run([binary, "report", "--format", "json", "--steps", str(log_dir)],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"could not run {binary} report: {e}"
    if p.returncode != 0:
        return None, p.stderr.strip() or f"{binary} report exited {p.returncode}"
    return json.loads(p.stdout), None


def describe_action(action):
    if action.get("kind") == "submit":
        msg = action.get("message")
        return "submit" + (f": {short(msg, 60)}" if msg else "")
    tag = action.get("tag", "?")
    args = action.get("arguments") or {}
    if tag == "bash" and "command" in args and len(args) == 1:
        return f"bash: {short(args['command'])}"
    parts = [f"{k}={short(json.dumps(v) if not isinstance(v, str) else v, 40)}" for k, v in args.items()]
    return f"{tag}: {short(', '.join(parts))}" if parts else tag


def describe_step(step, termination):
    """One call: the action or failure class, with the nudge or termination decision."""
    action = step.get("action")
    what = describe_action(action) if action else f"parse failure {step.get('parse_error') or '?'}"
    if step.get("nudge"):
        return f"NUDGE {step['nudge']}: rejected {what}"
    if step.get("terminated"):
        return f"TERMINATED {termination or '?'}: replaced {what}"
    flags = ["edit"] if step.get("is_edit") else []
    if step.get("is_submit") and action.get("kind") != "submit":
        flags.append("read as submit")
    return what + (f"  ({', '.join(flags)})" if flags else "")


def run_tests(task_dir, test_cmd):
    try:
        p = subprocess.run(shlex.split(test_cmd), cwd=task_dir, capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"could not run: {e}"
    out = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, (out[-1] if out else "")


def git_changes(task_dir):
    try:
        p = subprocess.run(["git", "status", "--porcelain"], cwd=task_dir, capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return [l for l in p.stdout.splitlines() if l.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log_dir", type=Path)
    ap.add_argument("--proxy-bin", help="asap-proxy binary that reads the traces")
    ap.add_argument("--task-dir", type=Path, help="task repository: show changes, run its tests")
    ap.add_argument("--test-cmd", default="python3 -m unittest -q", help="test command run in --task-dir")
    args = ap.parse_args(argv)

    if not args.log_dir.is_dir():
        print(f"summarize_trace: no log directory {args.log_dir}", file=sys.stderr)
        return 2
    print(f"== trace summary: {args.log_dir}")
    report, error = report_steps(proxy_binary(args.proxy_bin), args.log_dir)
    if report is None:
        print(f"summarize_trace: {error}", file=sys.stderr)
        return 1
    rows = report.get("trajectories", [])
    calls = [s for t in rows for s in t.get("steps", [])]
    print(f"sessions: {len(rows)}   completion calls: {len(calls)}")

    failures, tools, nudges = Counter(), Counter(), Counter()
    terminations, errors = [], []
    n = 0
    for t in rows:
        behaviour = t.get("behaviour") or {}
        steps = t.get("steps", [])
        print(f"session {t.get('session')} (profile {t.get('profile')}, task {t.get('instance_id')}, "
              f"run {t.get('run')}): {len(steps)} call(s), ending {behaviour.get('ending', '?')}")
        for s in steps:
            n += 1
            if s.get("action") and not s.get("nudge") and not s.get("terminated"):
                tools[describe_action(s["action"]).split(":")[0]] += 1
            if s.get("parse_error"):
                failures[s["parse_error"]] += 1
            if s.get("nudge"):
                nudges[s["nudge"]] += 1
            print(f"  #{n:<3} step {s.get('step', '?'):<3} {describe_step(s, t.get('termination'))}")
        if t.get("termination"):
            terminations.append(t["termination"])
        if t.get("error"):
            errors.append(t["error"])
            print(f"  proxy error: {short(t['error'], 100)}")

    parsed = sum(1 for s in calls if s.get("action"))
    print(f"parsed actions: {parsed} of {len(calls)}"
          + (f" (sent: {', '.join(f'{k} {v}' for k, v in tools.most_common())})" if tools else ""))
    print(f"parse failures: {sum(failures.values())}"
          + (f" ({', '.join(f'{k} {v}' for k, v in failures.most_common())})" if failures else ""))
    print(f"nudges: {sum(nudges.values())}"
          + (f" ({', '.join(f'{k} {v}' for k, v in nudges.items())})" if nudges else ""))
    print("terminated by the proxy: " + (", ".join(terminations) if terminations else "no"))
    print(f"proxy errors: {len(errors)}")

    if args.task_dir:
        changes = git_changes(args.task_dir)
        if changes is not None:
            print(f"changed files in {args.task_dir}: " + (", ".join(short(c, 60) for c in changes[:10]) or "none"))
        rc, last = run_tests(args.task_dir, args.test_cmd)
        verdict = "PASS" if rc == 0 else "FAIL" if rc is not None else "ERROR"
        print(f"tests ({args.test_cmd}): {verdict}" + (f" (exit {rc})" if rc not in (0, None) else "")
              + (f": {short(last, 80)}" if last else ""))
    print("trace files:")
    for f in sorted(args.log_dir.glob("*.jsonl")):
        print(f"  {f.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

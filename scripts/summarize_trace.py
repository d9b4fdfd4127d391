#!/usr/bin/env python3
"""Summarize asap-proxy trace logs: what the model did, step by step.

    scripts/summarize_trace.py LOG_DIR [--task-dir DIR --test-cmd "python3 -m unittest -q"]

Reads every `*.jsonl` trace file in LOG_DIR (one per session: a `session` record, then one
`step` record per completion call) and prints the sessions, each step's parsed action or parse
failure, counts of parse failures by class, finish reasons, nudges, backend time, the proxy
errors returned to the client, and the trace file paths. With --task-dir it also shows what
changed in that git repository and whether its tests pass now (--test-cmd, run there).
Standard library only. Exits 0 unless LOG_DIR is missing.
"""

import argparse
import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path


def short(text, limit=80):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load(path):
    """(session record data or None, [step data], torn/unreadable line count)"""
    session, steps, bad = None, [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1  # a torn last line: readers skip it
            continue
        kind = rec.get("type")
        if kind == "session":
            session = rec.get("data", {})
        elif kind == "step":
            steps.append(dict(rec.get("data", {})))
        elif kind in ("nudge", "terminate") and steps:
            # Each follows the step it concerns (docs/trace-format.md).
            steps[-1]["nudge" if kind == "nudge" else "termination"] = rec.get("data", {})
    return session, steps, bad


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
    ap.add_argument("--task-dir", type=Path, help="task repository: show changes, run its tests")
    ap.add_argument("--test-cmd", default="python3 -m unittest -q", help="test command run in --task-dir")
    args = ap.parse_args(argv)

    if not args.log_dir.is_dir():
        print(f"summarize_trace: no log directory {args.log_dir}", file=sys.stderr)
        return 2
    files = sorted(args.log_dir.glob("*.jsonl"))
    sessions = []
    for f in files:
        session, steps, bad = load(f)
        start = (session or {}).get("time_ms") or min((s.get("time_ms", 0) for s in steps), default=0)
        sessions.append((start, f, session or {}, steps, bad))
    sessions.sort(key=lambda s: (s[0], s[1].name))

    all_steps = [s for _, _, _, steps, _ in sessions for s in steps]
    print(f"== trace summary: {args.log_dir}")
    print(f"sessions: {len(sessions)}   steps (completion calls): {len(all_steps)}")

    failures, backend_finish, response_finish, tools = Counter(), Counter(), Counter(), Counter()
    errors, nudges, terminations = [], Counter(), []
    backend_ms = total_ms = 0.0
    prompt_tokens = completion_tokens = cached_tokens = 0
    cache_reported = False
    n = 0
    for start, f, session, steps, bad in sessions:
        head = f"session {session.get('session', f.stem)}"
        if session:
            head += f" (profile {session.get('profile')}, format {session.get('format')})"
        print(f"{head}: {len(steps)} step(s)" + (f", {bad} unreadable line(s) skipped" if bad else ""))
        for s in steps:
            n += 1
            t = s.get("timings") or {}
            backend_ms += t.get("backend_ms") or 0.0
            total_ms += t.get("total_ms") or 0.0
            comp = s.get("completion") or {}
            usage = comp.get("usage") or {}
            prompt_tokens += usage.get("prompt_tokens") or 0
            completion_tokens += usage.get("completion_tokens") or 0
            details = usage.get("prompt_tokens_details") or {}
            if "cached_tokens" in details:
                cache_reported = True
                cached_tokens += details["cached_tokens"] or 0
            if comp:
                backend_finish[comp.get("finish_reason") or "none"] += 1
            resp = s.get("response") or {}
            if resp:
                response_finish[resp.get("finish_reason") or "none"] += 1
            if s.get("nudge"):
                nudges[s["nudge"].get("kind", "?")] += 1
            if s.get("termination"):
                terminations.append(s["termination"].get("reason", "?"))
            parse = s.get("parse") or {}
            if s.get("nudge"):
                what = f"NUDGE {s['nudge'].get('kind')}: rejected " + (
                    describe_action(parse["action"]) if parse.get("action") else "output")
            elif s.get("error"):
                errors.append(s["error"])
                what = f"PROXY ERROR: {short(s['error'], 90)}"
            elif parse.get("action"):
                what = describe_action(parse["action"])
                tools[what.split(":")[0]] += 1
                tc = resp.get("tool_call")
                fn = (tc or {}).get("function") or {}
                if fn and (parse["action"].get("kind") == "submit" or fn.get("name") != parse["action"].get("tag")):
                    what += f"  (sent as {fn.get('name')} {short(fn.get('arguments', ''), 60)})"
            elif parse.get("error"):
                cls = parse["error"].get("class", "?")
                failures[cls] += 1
                what = f"parse failure {cls}: {short(parse['error'].get('detail', ''), 70)}"
            else:
                what = "(no parse record)"
            if s.get("termination"):
                term = s["termination"]
                what = (f"TERMINATED {term.get('reason', '?')} ({term.get('on_terminate', '?')}): "
                        f"replaced {what}")
            extra = []
            if comp:
                extra.append(f"{usage.get('completion_tokens', '?')} tok, {comp.get('finish_reason')}")
            extra.append(f"{(t.get('total_ms') or 0) / 1000:.1f} s")
            print(f"  #{n:<3} step {s.get('step', '?'):<3} {what}  [{'; '.join(extra)}]")

    ok = sum(tools.values())
    print(f"parsed actions: {ok} of {len(all_steps)}" + (f" ({', '.join(f'{k} {v}' for k, v in tools.most_common())})" if tools else ""))
    print(f"parse failures: {sum(failures.values())}" + (f" ({', '.join(f'{k} {v}' for k, v in failures.most_common())})" if failures else ""))
    print("backend finish reasons: " + (", ".join(f"{k} {v}" for k, v in backend_finish.most_common()) or "-"))
    print("reply finish reasons: " + (", ".join(f"{k} {v}" for k, v in response_finish.most_common()) or "-"))
    print(f"nudges: {sum(nudges.values())}" + (f" ({', '.join(f'{k} {v}' for k, v in nudges.items())})" if nudges else ""))
    print("terminated by the proxy: " + (", ".join(terminations) if terminations else "no"))
    print(f"proxy errors: {len(errors)}")
    print(f"backend time: {backend_ms / 1000:.1f} s of {total_ms / 1000:.1f} s in the proxy; "
          f"tokens: prompt {prompt_tokens}" + (f" (cached {cached_tokens})" if cache_reported else "")
          + f", generated {completion_tokens}")

    if args.task_dir:
        changes = git_changes(args.task_dir)
        if changes is not None:
            print(f"changed files in {args.task_dir}: " + (", ".join(short(c, 60) for c in changes[:10]) or "none"))
        rc, last = run_tests(args.task_dir, args.test_cmd)
        verdict = "PASS" if rc == 0 else "FAIL" if rc is not None else "ERROR"
        print(f"tests ({args.test_cmd}): {verdict}" + (f" (exit {rc})" if rc not in (0, None) else "")
              + (f": {short(last, 80)}" if last else ""))
    print("trace files:")
    for _, f, _, _, _ in sessions:
        print(f"  {f.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

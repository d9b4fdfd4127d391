#!/usr/bin/env python3
"""Ablation runner: a real scaffold through asap-proxy over bundled bug-fix tasks, for every
configuration of a grid (format x prefix K x nudges), then one `asap-proxy report` row per
configuration.

    scripts/ablation.py --backend http://127.0.0.1:8091/v1 --runs 5 --steps 15 \\
        --formats markdown_xml,xml,markdown,json --k 3,0 --nudges on,off --out ablation-runs/gemma

Without --backend the bundled model (scripts/model-server.sh) is started on a free port and
stopped at the end. For each configuration the proxy is started once (its own --log-dir and
--label), and each (task, run) is run in a fresh git copy of the task's repository with the
scaffold (`mini`: mini-swe-agent 2.x in tool-calling mode via scripts/run_mini.py;
`openhands`: the OpenHands SDK agent via scripts/run_openhands.py). By default each task
starts from a 2-step reference prefix made by a scripted explorer in its repository, paired
with the demonstration scripts/ablation-demo.json (--prefix-source explore; `demo`: only the
proxy's built-in demonstration). Afterwards the task's test files are restored from the
original and its test command decides `resolved`.

Output directory (resumable: a (config, task, run) with a line in results.jsonl is skipped;
traces of an interrupted run are deleted before it is run again):

    OUT/<config>/logs/*.jsonl        proxy traces (docs/trace-format.md)
    OUT/<config>/results.jsonl       one line per finished run (report --results format plus
                                     edited_fix_file, changed_files, exit_status, wall_s, ...)
    OUT/<config>/runs/<task>/<run>/  the repository copy and the scaffold's output
    OUT/<config>/report.json         `asap-proxy report --format json` of that config
    OUT/summary.md, OUT/summary.json the table over all configurations (also printed)

Tasks: every directory under --tasks with a `task.toml` (instance_id, task_file, test_command,
fix_files, test_files; see docs/ablation.md). The agent sees the repository without
task.toml and without the task file; the task text is its instructions.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORMAT_ALIASES = {"md_xml": "markdown_xml", "md": "markdown"}
SCAFFOLDS = ("mini", "openhands")
FORMATS = ("markdown_xml", "xml", "markdown", "json")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


# ---------------------------------------------------------------------------------------------
# Tasks


def load_tasks(root: Path, names: list[str] | None) -> list[dict]:
    tasks = []
    for meta in sorted(root.glob("*/task.toml")):
        with meta.open("rb") as f:
            try:
                t = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise SystemExit(f"ablation: {meta}: {e}")
        t["dir"] = meta.parent
        t.setdefault("instance_id", meta.parent.name)
        t.setdefault("task_file", "TASK.md")
        t.setdefault("test_command", "python3 -m unittest -q")
        t.setdefault("fix_files", [])
        t.setdefault("test_files", [])
        if names and t["instance_id"] not in names and meta.parent.name not in names:
            continue
        task_file = meta.parent / t["task_file"]
        if not task_file.is_file():
            raise SystemExit(f"ablation: {meta}: task_file {t['task_file']!r} not found in {meta.parent}")
        t["text"] = task_file.read_text()
        if not t["fix_files"]:
            log(f"ablation: warning: {meta} lists no fix_files, so 'right file edited' cannot count for it")
        tasks.append(t)
    if not tasks:
        raise SystemExit(f"ablation: no task.toml under {root}" + (f" named {names}" if names else ""))
    return tasks


def fresh_repo(task: dict, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    hidden = {"task.toml", task["task_file"]}
    shutil.copytree(task["dir"], dest, ignore=lambda d, names: [
        n for n in names if (Path(d) == task["dir"] and n in hidden) or n == "__pycache__"])
    git = ["git", "-C", str(dest), "-c", "user.email=ablation@example.invalid", "-c", "user.name=ablation"]
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "task"], check=True)


def judge(task: dict, repo: Path) -> dict:
    """Changed files, whether a fix file changed, then the tests with the original test files."""
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True).stdout
    changed = sorted({line[3:].strip().strip('"') for line in status.splitlines() if line.strip()}
                     - {""})
    changed = [c for c in changed if "__pycache__" not in c and not c.endswith(".pyc")]
    for rel in task["test_files"]:
        shutil.copy2(task["dir"] / rel, repo / rel)
    try:
        rc = subprocess.run(task["test_command"], shell=True, cwd=repo, capture_output=True,
                            timeout=120).returncode
    except subprocess.TimeoutExpired:
        rc = -1
    return {
        "resolved": rc == 0,
        "empty_patch": not [c for c in changed if c not in task["test_files"]],
        "edited_fix_file": any(f in changed for f in task["fix_files"]),
        "changed_files": changed,
    }


# ---------------------------------------------------------------------------------------------
# Reference prefixes by a scripted explorer


EXPLORE_DEMO = REPO / "scripts" / "ablation-demo.json"
LISTING_CMD = 'find . -name "*.py" -not -path "./.git/*" | sort'
SOURCES_CMD = 'grep -rn "" --include="*.py" --exclude-dir=tests .'


def explore_demo() -> dict:
    """The runner's demonstration, checked to open with the explorer's two commands (the
    alignment the explorer relies on)."""
    demo = json.loads(EXPLORE_DEMO.read_text())
    opening = [s["action"]["arguments"]["command"] for s in demo["steps"][:2]]
    assert opening == [LISTING_CMD, SOURCES_CMD], "the demonstration must open with the explorer's commands"
    return demo


def explore_prefix(task: dict, work: Path) -> dict:
    """The first two steps of a reference trajectory for `task`, made by running generic
    commands in a fresh copy of its repository (the paper's prefix is the start of a reference
    run of the same task; with no reference model at hand, a fixed exploration script stands in
    for it): list the Python files, then print every non-test source line with its path and
    line number (`grep -rn`). Every observation is real output; no step edits anything, so no
    prefix holds a fix. The prefix names the demonstration `scripts/ablation-demo.json` (another
    task; it opens with the same two commands, then changes a line and runs the tests) as its
    `example`, so the live trajectory starts where the demonstration's third step, an edit,
    follows (docs/ablation.md)."""
    repo = work / "repo"
    fresh_repo(task, repo)

    def sh(command: str) -> str:
        try:
            p = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True, timeout=120)
            text = p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            text = "(timed out)"
        text = text.replace(str(repo) + "/", "")
        return text if len(text) <= 3000 else text[:1500] + "\n…\n" + text[-1500:]

    demo = explore_demo()
    steps = [(step["thought"], cmd, sh(cmd)) for step, cmd in zip(demo["steps"], (LISTING_CMD, SOURCES_CMD))]
    shutil.rmtree(work, ignore_errors=True)
    return {
        "instance_id": task["instance_id"],
        "task_text": task["text"],
        "source": {"model": "scripted explorer (scripts/ablation.py --prefix-source explore)",
                   "date": time.strftime("%Y-%m-%d"), "scaffold": "asap-proxy"},
        "steps": [{"thought": t, "action": {"tool": "bash", "arguments": {"command": c}}, "observation": o}
                  for t, c, o in steps],
        "example": demo["instance_id"],
    }


def explore_prefix_is_current(prefix: dict) -> bool:
    """Whether a prefix file was made by this explorer: the same commands and demonstration."""
    commands = [s["action"]["arguments"].get("command") for s in prefix.get("steps", [])]
    return commands == [LISTING_CMD, SOURCES_CMD] and prefix.get("example") == explore_demo()["instance_id"]


# ---------------------------------------------------------------------------------------------
# Proxy and scaffold processes


class Proxy:
    def __init__(self, binary: Path, backend: str, log_dir: Path, label: str, fmt: str, k: int,
                 nudges: bool, extra: list[str], out: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        cmd = [str(binary), "serve", "--listen", f"127.0.0.1:{self.port}", "--backend", backend,
               "--log-dir", str(log_dir), "--label", label, "--format", fmt,
               "--prefix-k", str(k), "--nudges", "on" if nudges else "off", *extra]
        self.log = open(out / "proxy.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if not wait_http(f"http://127.0.0.1:{self.port}/health", 30):
            self.stop()
            raise SystemExit(f"ablation: asap-proxy did not start (see {out / 'proxy.log'})")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def run_scaffold(args, scaffold: str, proxy_url: str, task: dict, run: int, repo: Path,
                 run_dir: Path) -> dict:
    task_file = run_dir / "task.md"
    task_file.write_text(task["text"])
    headers = [f"X-ASAP-Task:{task['instance_id']}", f"X-ASAP-Run:{run}"]
    script = "run_mini.py" if scaffold == "mini" else "run_openhands.py"
    cmd = [args.python, str(REPO / "scripts" / script), "--base-url", proxy_url,
           "--task-dir", str(repo), "--task-file", str(task_file),
           "--step-limit", str(args.steps), "--max-tokens", str(args.max_tokens),
           "--output", str(run_dir / "trajectory.json")]
    for h in headers:
        cmd += ["--header", h]
    started = time.monotonic()
    with open(run_dir / "agent.out", "w") as out, open(run_dir / "agent.err", "w") as err:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=err, timeout=args.run_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    wall = time.monotonic() - started
    fields = {}
    for line in (run_dir / "agent.out").read_text().splitlines():
        key, _, value = line.partition(": ")
        fields[key.strip()] = value.strip()
    return {"exit_status": fields.get("exit_status", "timeout" if rc == -1 else f"rc={rc}"),
            "model_calls": int(fields["model_calls"]) if fields.get("model_calls", "").isdigit() else None,
            "scaffold_rc": rc, "wall_s": round(wall, 2)}


def drop_partial_traces(log_dir: Path, instance_id: str, run: int) -> None:
    """Traces left by an interrupted attempt at (task, run): removed so report sees one."""
    for path in log_dir.glob("*.jsonl"):
        try:
            with path.open() as f:
                first = json.loads(f.readline())
        except (OSError, ValueError):
            continue
        data = first.get("data", {}) if first.get("type") == "session" else {}
        if data.get("instance_id") == instance_id and data.get("run") == run:
            path.unlink()


def read_results(path: Path) -> dict:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line from an interrupted write
            done[(row["instance_id"], row["run"])] = row
    return done


# ---------------------------------------------------------------------------------------------
# Summary


def trace_figures(log_dir: Path) -> dict:
    """Backend figures from the step records: cached/prompt tokens, backend seconds, calls."""
    prompt = cached = calls = with_cache = 0
    backend_ms = 0.0
    unstopped = 0
    for path in log_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") != "step":
                continue
            data = rec["data"]
            completion = data.get("completion") or {}
            usage = completion.get("usage") or {}
            if not completion:
                continue
            calls += 1
            backend_ms += (data.get("timings") or {}).get("backend_ms") or 0
            if completion.get("finish_reason") == "length":
                unstopped += 1
            if usage.get("prompt_tokens"):
                details = usage.get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    with_cache += 1
                    prompt += usage["prompt_tokens"]
                    cached += details["cached_tokens"]
    return {"calls": calls, "backend_s_per_call": backend_ms / 1000 / calls if calls else None,
            "cache_hit_rate": cached / prompt if prompt else None, "calls_with_cache_figure": with_cache,
            "length_stops": unstopped}


def summarize(args, configs: list[dict]) -> list[dict]:
    rows = []
    for c in configs:
        cdir: Path = c["dir"]
        results = read_results(cdir / "results.jsonl")
        if not results or not any((cdir / "logs").glob("*.jsonl")):
            continue
        rep = subprocess.run([str(args.proxy_bin), "report", str(cdir / "logs"), "--results",
                              str(cdir / "results.jsonl"), "--k", "1", "--format", "json"],
                             capture_output=True, text=True)
        if rep.returncode != 0:
            log(f"ablation: report failed for {c['name']}: {rep.stderr.strip()[-400:]}")
            continue
        (cdir / "report.json").write_text(rep.stdout)
        report = json.loads(rep.stdout)
        label = next((lab for lab in report["labels"] if lab["label"] == c["name"]), None)
        if label is None:
            continue
        b = label["behaviour"]
        figures = trace_figures(cdir / "logs")
        runs = list(results.values())
        calls = sum(r.get("model_calls") or 0 for r in runs)
        wall = sum(r.get("wall_s") or 0 for r in runs)

        def rate(key):
            v = b.get(key)
            return (v["rate"], v["count"], v["total"]) if v else (None, 0, 0)

        rows.append({
            "config": c["name"], "scaffold": c["scaffold"], "format": c["format"], "k": c["k"],
            "nudges_on": c["nudges"], "tasks": label["tasks"], "runs": label["runs"],
            "pass_at_1": (label.get("pass_at_k") or {}).get("1"),
            "resolved": sum(1 for r in runs if r["resolved"]),
            "edited_fix_file": sum(1 for r in runs if r.get("edited_fix_file")),
            "parsable_turns": rate("parsable_turns"), "valid_tool_calls": rate("valid_tool_calls"),
            "autonomous_edit": rate("autonomous_edit"), "active_testing": rate("active_testing"),
            "explicit_submission": rate("explicit_submission"),
            "nudges": sum((label.get("nudges_fired") or {}).values()),
            # How the runs that did not submit ended (report's `endings`, issue 17).
            "endings": {k: v for k, v in (label.get("endings") or {}).items()
                             if v and k != "submitted"},
            "s_per_step": wall / calls if calls else None,
            "backend_s_per_call": figures["backend_s_per_call"],
            "cache_hit_rate": figures["cache_hit_rate"], "length_stops": figures["length_stops"],
            "calls": figures["calls"],
        })
    return rows


def pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def table(rows: list[dict]) -> str:
    head = ["config", "runs", "Pass@1 %", "right file edited", "parsable turns %",
            "valid tool calls %", "edit %", "tests run %", "submitted %", "nudges", "endings (not submitted)",
            "s/step", "cache hit %"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        pt, vt = r["parsable_turns"], r["valid_tool_calls"]
        term = ", ".join(f"{k} {v}" for k, v in sorted(r["endings"].items())) or "–"
        sps = "–" if r["s_per_step"] is None else f"{r['s_per_step']:.1f}"
        cells = [r["config"], str(r["runs"]), pct(r["pass_at_1"]), f"{r['edited_fix_file']}/{r['runs']}",
                 f"{pct(pt[0])} ({pt[1]}/{pt[2]})", f"{pct(vt[0])} ({vt[1]}/{vt[2]})",
                 pct(r["autonomous_edit"][0]), pct(r["active_testing"][0]),
                 pct(r["explicit_submission"][0]), str(r["nudges"]), term, sps, pct(r["cache_hit_rate"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--backend", help="completion backend base URL (…/v1); default: start the bundled model")
    ap.add_argument("--tasks", type=Path, default=REPO / "examples" / "tasks", help="directory of tasks")
    ap.add_argument("--task", action="append", help="only this task (repeatable)")
    ap.add_argument("--runs", type=int, default=5, help="runs per task and configuration (default 5)")
    ap.add_argument("--steps", type=int, default=15, help="scaffold step limit (model calls, default 15)")
    ap.add_argument("--max-tokens", type=int, default=512, help="max_tokens per model call (default 512)")
    ap.add_argument("--formats", default="markdown_xml", help="comma list: markdown_xml,xml,markdown,json")
    ap.add_argument("--k", default="3", help="comma list of prefix K values (default 3)")
    ap.add_argument("--nudges", default="on", help="comma list of on/off (default on)")
    ap.add_argument("--prefix-source", default="explore", choices=("demo", "explore"),
                    help="explore (default): a 2-step reference prefix per task made by a scripted "
                    "explorer in the task's repository, paired with the runner's demonstration "
                    "(the paper's prefix is the start of a reference run of the same task); demo: "
                    "only the proxy's own prefixes (the built-in demonstration for tasks without "
                    "one) (docs/ablation.md)")
    ap.add_argument("--scaffold", default="mini", help="comma list: mini, openhands (default mini)")
    ap.add_argument("--out", type=Path, default=Path("ablation-runs"), help="output directory")
    ap.add_argument("--proxy-bin", type=Path, help="asap-proxy binary (default: target/release, "
                    "else target/debug; built with cargo when neither exists)")
    ap.add_argument("--python", help="Python with the scaffolds installed "
                    "(default: ~/.cache/asap-proxy/venv-e2e, else scripts/venv.sh)")
    ap.add_argument("--run-timeout", type=int, default=1800, help="seconds per scaffold run (default 1800)")
    ap.add_argument("--summary-only", action="store_true", help="only rebuild the summary of --out")
    ap.add_argument("proxy_args", nargs="*", help="after --: extra `asap-proxy serve` flags")
    args = ap.parse_args(argv)
    # `kill PID` stops like Ctrl-C: the proxy and model server are stopped, results kept.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    formats = [FORMAT_ALIASES.get(f.strip(), f.strip()) for f in args.formats.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        ap.error(f"--formats: unknown {bad}; a comma list of {', '.join(FORMATS)}")
    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or any(k < 0 for k in ks):
        ap.error(f"--k: a comma list of prefix lengths >= 0, not {args.k!r}")
    switches = [n.strip().lower() for n in args.nudges.split(",") if n.strip()]
    if not switches or any(n not in ("on", "off", "true", "false", "1", "0", "yes", "no") for n in switches):
        ap.error(f"--nudges: a comma list of on/off, not {args.nudges!r}")
    nudges = [n in ("on", "true", "1", "yes") for n in switches]
    scaffolds = [s.strip() for s in args.scaffold.split(",") if s.strip()]
    bad = [s for s in scaffolds if s not in SCAFFOLDS]
    if bad:
        ap.error(f"unknown scaffold {bad}; one of {SCAFFOLDS}")
    tasks = load_tasks(args.tasks.resolve(), args.task)

    if args.proxy_bin is None:
        for candidate in (REPO / "target" / "release" / "asap-proxy", REPO / "target" / "debug" / "asap-proxy"):
            if candidate.exists():
                args.proxy_bin = candidate
                break
        else:
            subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "asap-proxy"], cwd=REPO, check=True)
            args.proxy_bin = REPO / "target" / "release" / "asap-proxy"
    if args.python is None:
        venv = Path(os.environ.get("ASAP_CACHE", Path.home() / ".cache" / "asap-proxy")) / "venv-e2e" / "bin" / "python"
        args.python = str(venv) if venv.exists() else subprocess.run(
            [str(REPO / "scripts" / "venv.sh"), "--mini"], capture_output=True, text=True, check=True).stdout.strip()

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    configs = []
    for scaffold in scaffolds:
        for fmt in formats:
            for k in ks:
                for n in nudges:
                    name = f"{scaffold}-{fmt}-k{k}-nudges-{'on' if n else 'off'}"
                    if args.prefix_source == "explore":
                        name += "-explore"
                    configs.append({"name": name, "scaffold": scaffold, "format": fmt, "k": k,
                                    "nudges": n, "dir": out / name})
    total = len(configs) * len(tasks) * args.runs

    model_port = None
    if not args.summary_only:
        with open(out / "command.txt", "a") as f:
            f.write(" ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]) + "\n")
        if args.backend is None:
            model_port = free_port()
            # OpenHands' first prompt (~7,200 tokens) plus the prefix and demonstration do not fit
            # the server's default 8,192-token context.
            ctx = ["--ctx", "16384"] if "openhands" in scaffolds else []
            subprocess.run([str(REPO / "scripts" / "model-server.sh"), "start", "--port", str(model_port), *ctx],
                           check=True, stdout=subprocess.DEVNULL)
            args.backend = f"http://127.0.0.1:{model_port}/v1"
        log(f"ablation: {len(configs)} configuration(s) x {len(tasks)} task(s) x {args.runs} run(s) "
            f"= {total} runs, backend {args.backend}, proxy {args.proxy_bin}, out {out}")
    if args.prefix_source == "explore" and not args.summary_only:
        prefix_dir = out / "prefixes"
        prefix_dir.mkdir(exist_ok=True)
        shutil.copyfile(EXPLORE_DEMO, prefix_dir / EXPLORE_DEMO.name)
        for t in tasks:
            path = prefix_dir / f"{t['instance_id']}.json"
            # Kept for a resumed grid (every run of a task sees the same prefix), remade when it
            # was written by another version of the explorer.
            if not path.exists() or not explore_prefix_is_current(json.loads(path.read_text())):
                path.write_text(json.dumps(explore_prefix(t, out / ".explore" / t["instance_id"]), indent=1) + "\n")
        args.proxy_args = ["--prefixes", str(prefix_dir), *args.proxy_args]
        log(f"ablation: reference prefixes by the scripted explorer in {prefix_dir}")
    try:
        done_count = 0
        started = time.monotonic()
        ran = 0
        for ci, c in enumerate(configs if not args.summary_only else []):
            cdir: Path = c["dir"]
            (cdir / "logs").mkdir(parents=True, exist_ok=True)
            results_path = cdir / "results.jsonl"
            done = read_results(results_path)
            todo = [(t, r) for t in tasks for r in range(args.runs) if (t["instance_id"], r) not in done]
            done_count += len(tasks) * args.runs - len(todo)
            if not todo:
                log(f"[{ci + 1}/{len(configs)} {c['name']}] all {len(tasks) * args.runs} runs done, skipped")
                continue
            proxy = Proxy(args.proxy_bin, args.backend, cdir / "logs", c["name"], c["format"], c["k"],
                          c["nudges"], args.proxy_args, cdir)
            try:
                for task, run in todo:
                    tid = task["instance_id"]
                    run_dir = cdir / "runs" / tid / str(run)
                    run_dir.mkdir(parents=True, exist_ok=True)
                    drop_partial_traces(cdir / "logs", tid, run)
                    repo = run_dir / "repo"
                    fresh_repo(task, repo)
                    info = run_scaffold(args, c["scaffold"], proxy.url, task, run, repo, run_dir)
                    verdict = judge(task, repo)
                    row = {"instance_id": tid, "run": run, "label": c["name"], **verdict, **info}
                    with open(results_path, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    done_count += 1
                    ran += 1
                    eta = (time.monotonic() - started) / ran * (total - done_count)
                    log(f"[{ci + 1}/{len(configs)} {c['name']}] {tid} run {run}: {info['exit_status']}, "
                        f"{info['model_calls']} calls, {info['wall_s']:.0f} s, "
                        f"{'RESOLVED' if verdict['resolved'] else 'unresolved'}, "
                        f"right file {'edited' if verdict['edited_fix_file'] else 'not edited'}"
                        f"  ({done_count}/{total}, eta {eta / 60:.0f} min)")
            finally:
                proxy.stop()
    except KeyboardInterrupt:
        log("ablation: interrupted; rerun the same command to resume")
        return 130
    finally:
        if model_port is not None:
            subprocess.run([str(REPO / "scripts" / "model-server.sh"), "stop", "--port", str(model_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    rows = summarize(args, configs)
    if not rows:
        log(f"ablation: warning: no finished runs of these configurations under {out}")
    text = table(rows)
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

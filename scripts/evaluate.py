#!/usr/bin/env python3
"""evaluate.py: a checkpoint on SWE-bench through asap-proxy, from reference prefixes to the
`report` tables (docs/evaluate.md).

    # once per benchmark: reference runs of an instruct model, cut into a prefix set
    scripts/evaluate.py prefixes --dataset verified --instruct http://gpu:8001/v1 \\
        --out prefixes/verified.jsonl
    # per checkpoint (several --checkpoint: a sweep into one results tree)
    scripts/evaluate.py run --dataset verified --prefixes prefixes/verified.jsonl \\
        --checkpoint stage2-end=http://gpu:8000/v1 --runs 8 --workers 16 --out results/
    # the tables again, from the results tree
    scripts/evaluate.py report --out results/

Subcommands:
  dataset   a local dataset in SWE-bench's format from task folders (examples/tasks): DIR/test.jsonl
            (instance_id, repo, base_commit, problem_statement, patch, test_patch,
            FAIL_TO_PASS, PASS_TO_PASS, ...) plus DIR/repos/<instance_id>.git
  prefixes  record reference runs of an instruction-tuned chat model through
            `asap-proxy serve --mode passthrough` with the scaffold's batch runner (or
            --import existing trajectories), then `asap-proxy prefix build` against the
            dataset's gold patches: one prefix file plus <file>.provenance.json
  run       per checkpoint: start the proxy (--label, --prefixes), run the scaffold's own batch
            runner --runs times with the run index sent as X-ASAP-Run, collect predictions,
            judge them (--judge local: apply and run the tests here; harness: the official
            SWE-bench Docker harness), then `report` over the whole results tree. Resumable:
            finished instances, runs and judgements are kept; --stages picks stages.
  judge     only the judge stage of `run`
  report    only the report stage of `run`
  demo      the three commands here on three bundled tasks with fake models (no GPU, Docker, network)

Datasets (--dataset): `verified`, `lite` or `full` (SWE-bench on Hugging Face, test split, needs
network and Docker), any Hugging Face dataset name, a local dataset directory (test.jsonl and
repos/, from `dataset`), or a folder of task folders (converted with `dataset` on the fly).
Local datasets (instances with repo_path, from `dataset`) run in the scaffold's local environment
(no container) and the local judge; SWE-bench's own (by name, or its instances in a file) in Docker
and the official harness.
SWE-agent (--scaffold swe-agent, --python: a venv with SWE-agent installed from its repository by
`pip install -e`): named datasets as its `swe_bench` instances in Docker; local ones in SWE-ReX's
`local` deployment, one instance at a time, which writes /root/tools and /root/{state.json,
model.patch,.swe-agent-env} on this machine as in SWE-agent's containers (needs a writable /root).

Results tree (--out):
  OUT/<label>/logs/                       proxy traces (docs/trace-format.md)
  OUT/<label>/run-<i>/[shard-<s>/]        the scaffold's batch output (preds.json, trajectories)
  OUT/<label>/predictions/run-<i>.jsonl   SWE-bench predictions (model_name_or_path = label)
  OUT/<label>/judge/<label>.run<i>.json   the harness's report for run i (`report --results`)
  OUT/report.md, .json, .html             `asap-proxy report` over every label
Environment: ASAP_PROXY_BIN, ASAP_FAKE_BACKEND_BIN (default: this checkout's release builds, made
up to date with cargo), ASAP_CACHE (default ~/.cache/asap-proxy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ASAP_CACHE") or Path.home() / ".cache" / "asap-proxy")
NAMED = {
    "verified": "princeton-nlp/SWE-bench_Verified",
    "lite": "princeton-nlp/SWE-bench_Lite",
    "full": "princeton-nlp/SWE-bench",
}
SCAFFOLDS = ("mini", "swe-agent")
STAGES = ("agent", "judge", "report")
# Fixed identity and dates: a dataset's base commits are the same on every machine.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "asap-dataset", "GIT_AUTHOR_EMAIL": "dataset@example.invalid",
    "GIT_COMMITTER_NAME": "asap-dataset", "GIT_COMMITTER_EMAIL": "dataset@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def die(msg: str) -> None:
    raise SystemExit(f"evaluate: {msg}")


# Processes started in their own session (scaffold batch runners): stopped by process group
# when this script is interrupted, so none is left running.
CHILDREN: list[subprocess.Popen] = []


def stop_children() -> None:
    for proc in CHILDREN:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
    for proc in CHILDREN:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_child(command: list[str], **kw) -> int:
    """Runs a child in the foreground; interrupted, it gets SIGTERM (time to stop what it
    started) instead of subprocess.run's SIGKILL."""
    proc = subprocess.Popen(command, **kw)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git(*args: str, cwd: Path | None = None, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True,
                          env=os.environ | GIT_ENV, **kw)


def read_jsonl(path: Path) -> list[dict]:
    text = path.read_text()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# Datasets


def unittest_results(output: str) -> dict[str, str]:
    """Test id -> `ok`/`FAIL`/`ERROR`/`skipped` from `python -m unittest -v` output. The id is
    `module.Class.method` (Python 3.11+ prints it in parentheses; older ones print the class
    path only, so the method is appended)."""
    results = {}
    pattern = re.compile(r"^(\w+) \(([\w.]+)\)(?:[^\n]*\n[^\n]*?)?[^\n]*?\.\.\. (ok|FAIL|ERROR|skipped)",
                         re.MULTILINE)
    for method, path, status in pattern.findall(output):
        test_id = path if path.endswith("." + method) else f"{path}.{method}"
        results[test_id] = status
    return results


def run_tests(repo: Path, command: str, timeout: int = 600) -> tuple[dict[str, str], str]:
    try:
        r = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True,
                           timeout=timeout, env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"})
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = f"{e.stdout or ''}{e.stderr or ''}\n[timed out after {timeout} s]"
    return unittest_results(out), out


def build_dataset(tasks_root: Path, out: Path, only: list[str] | None = None) -> Path:
    """A SWE-bench-format dataset from task folders (docs/evaluate.md "Local datasets")."""
    metas = sorted(m for m in tasks_root.glob("*/task.toml") if not only or m.parent.name in only)
    if not metas:
        die(f"no */task.toml under {tasks_root}")
    (out / "repos").mkdir(parents=True, exist_ok=True)
    rows = []
    for meta in metas:
        task = tomllib.loads(meta.read_text())
        iid = task.get("instance_id", meta.parent.name)
        task_file = task.get("task_file", "TASK.md")
        gold = task.get("gold_patch")
        if not gold:
            die(f"{meta}: no gold_patch (a SWE-bench instance needs its reference fix)")
        hidden = {"task.toml", task_file}
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / iid
            shutil.copytree(meta.parent, work, ignore=lambda d, names: [
                n for n in names if (Path(d) == meta.parent and n in hidden) or n == "__pycache__"])
            # Test runs leave bytecode behind; a patch with binary files would not apply.
            (work / ".gitignore").write_text("__pycache__/\n*.pyc\n")
            git("init", "-q", "-b", "main", cwd=work)
            git("add", "-A", cwd=work)
            git("commit", "-qm", f"{iid}: base", cwd=work)
            base = git("rev-parse", "HEAD", cwd=work).stdout.strip()
            command = task.get("test_command", "python3 -m unittest -q").replace(" -q", "") + " -v"
            before, _ = run_tests(work, command)
            git("apply", "-", cwd=work, input=gold)
            after, log_after = run_tests(work, command)
            git("checkout", "-q", "--", ".", cwd=work)
            bare = out / "repos" / f"{iid}.git"
            if bare.exists():
                shutil.rmtree(bare)
            git("clone", "-q", "--bare", str(work), str(bare))
        fail_to_pass = sorted(t for t, s in after.items() if s == "ok" and before.get(t) != "ok")
        pass_to_pass = sorted(t for t, s in after.items() if s == "ok" and before.get(t) == "ok")
        if not fail_to_pass:
            die(f"{iid}: the gold patch makes no failing test pass:\n{log_after[-2000:]}")
        rows.append({
            "instance_id": iid,
            "repo": f"local/{iid}",
            "base_commit": base,
            "problem_statement": (meta.parent / task_file).read_text(),
            "patch": gold,
            "test_patch": "",
            "FAIL_TO_PASS": json.dumps(fail_to_pass),
            "PASS_TO_PASS": json.dumps(pass_to_pass),
            "version": "local",
            "environment_setup_commit": base,
            "created_at": "2026-01-01T00:00:00Z",
            "hints_text": "",
            # Not in SWE-bench: where the repository is and how its tests run (local judge).
            "repo_path": str((out / "repos" / f"{iid}.git").resolve()),
            "test_command": command,
            "test_files": json.dumps(task.get("test_files", [])),
        })
        log(f"dataset: {iid}: base {base[:12]}, FAIL_TO_PASS {len(fail_to_pass)}, PASS_TO_PASS {len(pass_to_pass)}")
    write_jsonl(out / "test.jsonl", rows)
    log(f"dataset: {len(rows)} instances in {out / 'test.jsonl'}")
    return out


class Dataset:
    """The instances of --dataset, and what the scaffold and the judge need to find them."""

    def __init__(self, spec: str, split: str, python: str, work: Path, only: str | None = None):
        self.spec, self.split = spec, split
        path = Path(spec)
        if path.is_dir() and any(path.glob("*/task.toml")):
            path = build_dataset(path, work / "dataset")
        if path.is_dir():
            file = path / f"{split}.jsonl"
            if not file.is_file():
                die(f"{path}: no {split}.jsonl (build one with `evaluate.py dataset`)")
            self.scaffold_subset, self.file = str(path.resolve()), file
            self.harness_dataset = str(file.resolve())
        elif path.is_file():
            # mini loads a directory's <split>.jsonl; a file is copied into one.
            copy = work / "dataset" / f"{split}.jsonl"
            copy.parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(copy, read_jsonl(path))
            self.scaffold_subset, self.file = str(copy.parent.resolve()), copy
            self.harness_dataset = str(path.resolve())
        else:
            if spec not in NAMED and (spec.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.-]+/[\w.-]+", spec)):
                die(f"--dataset {spec}: no such file or folder, and not a dataset name (verified, lite, "
                    "full, or ORG/NAME on Hugging Face)")
            name = NAMED.get(spec, spec)
            self.scaffold_subset = self.harness_dataset = name
            self.file = CACHE / "datasets" / f"{name.replace('/', '__')}.{split}.jsonl"
            if not self.file.is_file():
                log(f"dataset: downloading {name} ({split}) with `datasets`")
                self.file.parent.mkdir(parents=True, exist_ok=True)
                code = ("import json,sys; from datasets import load_dataset\n"
                        "rows = load_dataset(sys.argv[1], split=sys.argv[2])\n"
                        "open(sys.argv[3], 'w').writelines(json.dumps(dict(r)) + '\\n' for r in rows)")
                if subprocess.run([python, "-c", code, name, split, str(self.file)]).returncode:
                    self.file.unlink(missing_ok=True)
                    die(f"could not load {name} ({split}) from Hugging Face with {python} (network? "
                        "the `datasets` package?); the error is above")
        self.instances = read_jsonl(self.file)
        # Local: instances carry their repository (from `dataset`), so they run without a
        # container and the local judge can run their tests. Others (SWE-bench by name, or
        # its instances in a file) run in the scaffold's Docker sandbox, judged by the harness.
        self.local = bool(self.instances) and all("repo_path" in i for i in self.instances)
        if only:
            # A shard (--instances): the judge and the report see only these.
            self.instances = [i for i in self.instances if re.search(only, i["instance_id"])]
            if not self.instances:
                die(f"--instances {only!r} matches no instance of {spec}")
        self.by_id = {i["instance_id"]: i for i in self.instances}


# ---------------------------------------------------------------------------------------------
# Processes


_BUILT: dict[str, str] = {}


def built(binary: str, env: str) -> str:
    """`env`'s path when set; else this checkout's release build of `binary`, brought up to
    date with cargo once per process (seconds when nothing changed; a stale binary would run
    another version than the one checked out); else `binary` on PATH."""
    if os.environ.get(env):
        return os.environ[env]
    if binary not in _BUILT:
        if shutil.which("cargo") and (REPO / "Cargo.toml").is_file():
            started = time.time()
            if not (REPO / "target" / "release" / binary).is_file():
                log(f"evaluate: building {binary} (cargo build --release: minutes the first time)")
            subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", binary], cwd=REPO, check=True)
            if time.time() - started > 5:
                log(f"evaluate: built {binary} (cargo build --release) in {time.time() - started:.0f} s")
            _BUILT[binary] = str(REPO / "target" / "release" / binary)
        elif shutil.which(binary):
            _BUILT[binary] = shutil.which(binary)
        else:
            die(f"no {binary}: set {env} or install cargo")
    return _BUILT[binary]


def proxy_bin() -> str:
    return built("asap-proxy", "ASAP_PROXY_BIN")


def scaffold_python(given: str | None) -> str:
    """A Python that can run mini-swe-agent: --python, this one, else scripts/venv.sh --mini."""
    if given:
        return given
    probe = subprocess.run([sys.executable, "-c", "import minisweagent, datasets"], capture_output=True)
    if probe.returncode == 0:
        return sys.executable
    log("evaluate: no mini-swe-agent here; using scripts/venv.sh --mini (first run: a minute or more)")
    return subprocess.run([str(REPO / "scripts" / "venv.sh"), "--mini"], check=True,
                          capture_output=True, text=True).stdout.strip()


class Proxy:
    """`asap-proxy serve` on a free loopback port, stopped by process id."""

    def __init__(self, args: list[str], log_file: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = log_file
        self.proc = subprocess.Popen([proxy_bin(), "serve", "--listen", f"127.0.0.1:{self.port}", *args],
                                     stdout=log_file.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        CHILDREN.append(self.proc)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                die(f"the proxy exited ({self.proc.returncode}); its log:\n{log_file.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        die(f"the proxy did not answer /health within 60 s; its log: {log_file}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Proxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# Scaffold batch runs


def mini_config(proxy_url: str, model: str, run: int, local: bool, cwd: Path | None,
                step_limit: int | None, temperature: float | None = None) -> dict:
    """mini-swe-agent's settings on top of its swebench.yaml (docs/evaluate.md "mini")."""
    config = {
        "model": {
            "model_name": f"openai/{model}",
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": proxy_url,
                "api_key": "asap",
                "extra_headers": {"X-ASAP-Run": str(run)},
            },
        },
    }
    if temperature is not None:
        config["model"]["model_kwargs"]["temperature"] = temperature
    if step_limit:
        config["agent"] = {"step_limit": step_limit}
    if local:
        config["environment"] = {
            "environment_class": "local",
            "cwd": str(cwd),
            # swebench.yaml sources the image's ~/.bashrc; here that would be the user's own.
            "env": {"BASH_ENV": ""},
        }
        config["run"] = {
            "env_startup_command": (
                "find . -mindepth 1 -delete && git clone -q {{ repo_path }} . "
                "&& git checkout -q {{ base_commit }}"),
        }
    return config


def id_filter(ids: list[str]) -> str:
    return "^(" + "|".join(re.escape(i) for i in ids) + ")$"


def preds_in(run_dir: Path) -> dict[str, dict]:
    """instance_id -> prediction: preds.json (mini-swe-agent; SWE-agent at the end of a batch,
    over that batch's instances only) and SWE-agent's per-instance <id>/<id>.pred files (written
    as each instance ends; model_patch null when it submitted nothing)."""
    preds = {}
    for f in sorted(run_dir.glob("**/preds.json")):
        try:
            preds.update(json.loads(f.read_text()))
        except (OSError, json.JSONDecodeError):
            pass
    for f in sorted(run_dir.glob("*/*.pred")):
        try:
            pred = json.loads(f.read_text())
            preds[pred["instance_id"]] = pred | {"model_patch": pred.get("model_patch") or ""}
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            pass
    return preds


class Progress:
    """Instance runs done over every (label, run) of this invocation, and the time left
    (elapsed time per instance run done in this invocation, times the runs left), printed
    every 15 s while the scaffold runs."""

    def __init__(self, total: int):
        self.total, self.start = total, time.time()
        self.done_before = 0  # finished before the current batch run (this invocation or earlier)
        self.resumed = 0  # finished before this invocation
        self.current: Path | None = None  # the batch run going on: its output folder
        self.title = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def line(self) -> str:
        done = self.done_before + (len(preds_in(self.current)) if self.current else 0)
        elapsed = time.time() - self.start
        fresh = done - self.resumed
        left = (f"{(self.total - done) * elapsed / fresh / 60:.1f} min left" if fresh > 0
                else "time left unknown")
        return f"progress: {self.title}: {done}/{self.total} instance runs, {elapsed / 60:.1f} min, {left}"

    def _loop(self) -> None:
        while not self._stop.wait(15):
            log(self.line())

    def close(self) -> None:
        self._stop.set()


def run_mini(python: str, dataset: Dataset, proxy_url: str, model: str, run: int, run_dir: Path,
             workers: int, step_limit: int | None, instances: list[str], extra: list[str],
             temperature: float | None = None) -> None:
    """mini-swe-agent's SWE-bench batch runner for one run. Docker: one process with
    --workers; local: one process per shard (one working copy each)."""
    env = os.environ | {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_GLOBAL_CONFIG_DIR": str(run_dir / ".mswea"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "asap",
    }
    shards = [instances] if not dataset.local else [instances[s::workers] for s in range(workers)]
    procs = []
    for s, ids in enumerate(shards):
        if not ids:
            continue
        out = run_dir if not dataset.local else run_dir / f"shard-{s}"
        cwd = (out / "testbed").resolve() if dataset.local else None
        if cwd:
            cwd.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        config = out / "asap-mini.yaml"  # JSON is YAML; mini wants the .yaml suffix
        config.write_text(json.dumps(mini_config(proxy_url, model, run, dataset.local, cwd, step_limit, temperature), indent=2))
        command = [python, "-m", "minisweagent.run.benchmarks.swebench",
                   "--subset", dataset.scaffold_subset, "--split", dataset.split,
                   "--filter", id_filter(ids), "-o", str(out),
                   "-w", str(1 if dataset.local else workers),
                   "-c", "swebench.yaml", "-c", str(config), *extra]
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                stdout=(out / "batch.log").open("ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        CHILDREN.append(proc)
        procs.append((proc, out))
    for proc, out in procs:
        if proc.wait() != 0:
            die(f"mini-swe-agent's batch runner failed ({proc.returncode}); see {out / 'batch.log'}")


# SWE-agent's bundles (config/default.yaml) plus diff_state in local runs: diff_state keeps
# /root/model.patch at the repository's diff after every step, which is what SWE-agent falls back
# on when a run ends without `submit` (call limit) and it has no repository of its own to diff.
SWE_AGENT_BUNDLES = ["tools/registry", "tools/edit_anthropic", "tools/review_on_submit_m"]


def swe_agent_home(python: str) -> Path:
    """SWE-agent's checkout (its config/ and tools/), from the package the Python imports. Only an
    editable install (`pip install -e`) has them: SWE-agent finds its tool bundles there."""
    probe = subprocess.run([python, "-c", "import sweagent; print(sweagent.REPO_ROOT)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        die(f"{python} cannot import sweagent (SWE-agent is not on PyPI: clone "
            "github.com/SWE-agent/SWE-agent and `pip install -e` it into a venv, then pass that "
            f"venv's python as --python):\n{probe.stderr.strip()[-600:]}")
    home = Path(probe.stdout.strip().splitlines()[-1])  # importing sweagent logs a banner first
    if not (home / "config" / "default.yaml").is_file() or not (home / "tools").is_dir():
        die(f"SWE-agent at {home} has no config/default.yaml or tools/ (install it with pip install -e)")
    return home


def swe_agent_config(dataset: Dataset, proxy_url: str, label: str, run: int, run_dir: Path,
                     workers: int, step_limit: int | None, instances: list[str]) -> dict:
    """SWE-agent's run-batch settings on top of its config/default.yaml (docs/recipes.md
    "SWE-agent"). Named datasets: `swe_bench` instances in Docker (SWE-bench's images, the repo at
    /testbed), as SWE-agent runs them. Local datasets: one `expert_file` instance each in SWE-ReX's
    `local` deployment (no container): no repo object (SWE-agent would copy it to /<name>), a
    startup command clones repo_path at base_commit into run_dir/testbed and cds there."""
    registry = run_dir / "asap-litellm-registry.json"
    registry.write_text(json.dumps({f"openai/{label}": {
        "litellm_provider": "openai", "mode": "chat",
        "max_input_tokens": 32768, "max_output_tokens": 4096,
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
        "supports_function_calling": True,
    }}, indent=2))
    model = {
        "name": f"openai/{label}",
        "api_base": proxy_url,
        "api_key": "asap",
        "per_instance_cost_limit": 0,
        "total_cost_limit": 0,
        "max_input_tokens": 0,  # no client-side check: the proxy fits the backend's window
        "litellm_model_registry": str(registry.resolve()),
        "completion_kwargs": {"extra_headers": {"X-ASAP-Run": str(run)}},
        **({"per_instance_call_limit": step_limit} if step_limit else {}),
    }
    config: dict = {
        "agent": {"model": model},
        "output_dir": str(run_dir.resolve()),
        "num_workers": workers,
        "progress_bar": False,
    }
    if not dataset.local:
        named = {v: k for k, v in NAMED.items()}
        source = {"type": "swe_bench", "split": dataset.split, "filter": id_filter(instances)}
        if dataset.scaffold_subset in named:
            source["subset"] = named[dataset.scaffold_subset]
        else:
            source["path_override"] = dataset.scaffold_subset
        config["instances"] = source
        return config
    testbed = (run_dir / "testbed").resolve()
    rows = []
    for iid in instances:
        inst = dataset.by_id[iid]
        q = shlex.quote
        setup = (f"rm -f /root/model.patch && rm -rf {q(str(testbed))} && "
                 f"git clone -q {q(inst['repo_path'])} {q(str(testbed))} && cd {q(str(testbed))} && "
                 f"git checkout -q {q(inst['base_commit'])} && export ROOT=$(pwd -P)")
        rows.append({
            "env": {"deployment": {"type": "local"}, "repo": None, "post_startup_commands": [setup]},
            "problem_statement": {"type": "text", "id": iid, "text": inst["problem_statement"]},
        })
    instances_file = run_dir / "asap-instances.json"
    instances_file.write_text(json.dumps(rows, indent=2))
    config["instances"] = {"type": "expert_file", "path": str(instances_file.resolve())}
    # One working copy and SWE-ReX's local runtime writes /root/tools, /root/state.json and
    # /root/model.patch of this machine: one instance at a time.
    config["num_workers"] = 1
    config["agent"]["tools"] = {"bundles": [{"path": b} for b in SWE_AGENT_BUNDLES + ["tools/diff_state"]]}
    return config


# SWE-ReX's LocalRuntime.upload copies a folder with shutil.copytree, which refuses a target that
# exists: the second instance of a local run-batch would fail to install SWE-agent's tool bundles
# into /root/tools again. This starter lets the copy overwrite, then runs SWE-agent's own CLI.
SWE_AGENT_LOCAL_MAIN = """
import shutil, sys
from pathlib import Path
from swerex.runtime.abstract import UploadResponse
from swerex.runtime.local import LocalRuntime

async def upload(self, request):
    if Path(request.source_path).is_dir():
        shutil.copytree(request.source_path, request.target_path, dirs_exist_ok=True)
    else:
        shutil.copy(request.source_path, request.target_path)
    return UploadResponse()

LocalRuntime.upload = upload
from sweagent.run.run import main
sys.argv[0] = "sweagent"
sys.exit(main())
"""


def run_swe_agent(python: str, dataset: Dataset, proxy_url: str, label: str, run: int, run_dir: Path,
                  workers: int, step_limit: int | None, instances: list[str], extra: list[str],
                  temperature: float | None = None) -> None:
    """SWE-agent's `run-batch` for one run (one process; its output, preds.json and the
    per-instance <id>/<id>.pred files, in run_dir)."""
    home = swe_agent_home(python)
    run_dir.mkdir(parents=True, exist_ok=True)
    if dataset.local and workers > 1:
        log("evaluate: SWE-agent on a local dataset runs one instance at a time (--workers ignored)")
    config = swe_agent_config(dataset, proxy_url, label, run, run_dir, workers, step_limit, instances)
    if temperature is not None:
        config["agent"]["model"]["temperature"] = temperature
    config_file = run_dir / "asap-swe-agent.yaml"  # JSON is YAML
    config_file.write_text(json.dumps(config, indent=2))
    args = ["run-batch", "--config", str(home / "config" / "default.yaml"), "--config", str(config_file), *extra]
    command = ([python, "-c", SWE_AGENT_LOCAL_MAIN, *args] if dataset.local
               else [python, "-m", "sweagent.run.run", *args])
    env = os.environ | {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # The local runtime's shell inherits this PATH: the tools' `pip install` (edit_anthropic's
        # install.sh) and `python3` are the venv's, not the system's.
        "PATH": str(Path(python).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    batch_log = run_dir / "batch.log"
    with batch_log.open("ab") as out:
        proc = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT, cwd=home, start_new_session=True)
    if proc.returncode != 0:
        die(f"SWE-agent's run-batch failed ({proc.returncode}); see {batch_log}")
    missing = sorted(set(instances) - set(preds_in(run_dir)))
    if missing:
        log(f"evaluate: SWE-agent left no prediction for {', '.join(missing)} (see {batch_log} and "
            f"{run_dir / 'run_batch_exit_statuses.yaml'})")


# How mini-swe-agent's runs end when the agent, not the infrastructure, ended them: its
# submission and its step or cost limit. Any other exit status is the name of an exception (a
# backend or proxy error LiteLLM gave up on, a sandbox that did not start, ...).
MINI_ENDINGS = {"Submitted", "LimitsExceeded"}


def failed_instance_runs(run_dir: Path, instances: list[str]) -> dict[str, str]:
    """instance_id -> exit status of this batch run's instances that ended in an error
    (mini-swe-agent; SWE-agent's runs are not classified). Their predictions are removed, so
    that the next invocation runs them again, as an interrupted instance."""
    failed = {}
    for traj in sorted(run_dir.glob("**/*.traj.json")):
        try:
            doc = json.loads(traj.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        iid = doc.get("instance_id") or traj.parent.name
        status = (doc.get("info") or {}).get("exit_status")
        if iid in instances and status not in MINI_ENDINGS:
            failed[iid] = str(status)
    for preds in run_dir.glob("**/preds.json"):
        try:
            data = json.loads(preds.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if any(i in data for i in failed):
            preds.write_text(json.dumps({k: v for k, v in data.items() if k not in failed}, indent=2))
    return failed


def session_of(trace: Path) -> dict:
    try:
        with trace.open() as f:
            first = json.loads(f.readline())
    except (OSError, json.JSONDecodeError):
        return {}
    return first.get("data", {}) if first.get("type") == "session" else {}


def instance_of(session: dict, dataset: Dataset) -> str | None:
    """The instance a trace ran: its recorded id, else the instance whose problem statement its
    task text holds (traces of tasks the prefix set lacks carry no id)."""
    if session.get("instance_id") in dataset.by_id:
        return session["instance_id"]
    text = session.get("task_text", "")
    hits = [i for i, inst in dataset.by_id.items() if inst["problem_statement"].strip() and inst["problem_statement"].strip() in text]
    return max(hits, key=lambda i: len(dataset.by_id[i]["problem_statement"])) if hits else None


def has_turns(trace: Path) -> bool:
    """Whether a trace holds a model completion (a turn); a client's retried first request that
    the backend failed leaves a session with none."""
    try:
        with trace.open() as f:
            for line in f:
                record = json.loads(line)
                if record.get("type") == "step" and (record.get("data") or {}).get("completion"):
                    return True
    except (OSError, json.JSONDecodeError):
        return True  # unreadable: keep it, the report says what is wrong with it
    return False


def drop_retried_first_requests(logs: Path, run: int, dataset: Dataset) -> None:
    """After a batch run: where an (instance, run) has several traces, those without a single
    turn go. A client that retries its first request after a backend error opens a new session
    each time (nothing ties the retry to the failed one), which `report` would count as more runs
    of the task; the trajectory is the session that got answers."""
    by_instance: dict[str, list[Path]] = {}
    for trace in sorted(logs.glob("*.jsonl")):
        session = session_of(trace)
        if session.get("run") == run:
            by_instance.setdefault(instance_of(session, dataset) or "", []).append(trace)
    for iid, traces in sorted(by_instance.items()):
        empty = [t for t in traces if not has_turns(t)]
        if len(traces) > 1 and len(empty) < len(traces):
            for t in empty:
                t.unlink()
            if empty:
                log(f"run {run}: {iid}: removed {len(empty)} session(s) without a turn (retried first "
                    "requests after backend errors)")


def drop_unfinished_traces(logs: Path, run: int, finished: set[str], dataset: Dataset) -> None:
    """Before a run is resumed: traces of its instances without a prediction (interrupted) go,
    so that each (task, run) has one trajectory."""
    for trace in sorted(logs.glob("*.jsonl")):
        session = session_of(trace)
        if session.get("run") == run and instance_of(session, dataset) not in finished:
            log(f"resume: removing the interrupted trajectory {trace.name} (run {run})")
            trace.unlink()


def check_backend(url: str, what: str) -> None:
    """Fails fast when `url` is not an OpenAI-style API root that answers `GET /models`: a
    batch run against it would end every instance in an error, after the client's retries."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=15) as r:
            json.load(r)
    except urllib.error.HTTPError as e:
        die(f"{what}: GET {url.rstrip('/')}/models answered HTTP {e.code}: give the API root, "
            "e.g. http://host:8000/v1")
    except (OSError, ValueError) as e:
        die(f"{what}: {url} does not answer GET /models ({e}): is the server running, and is this "
            "its API root (with /v1)?")


def agent_stage(args, dataset: Dataset, label: str, backend: str, out: Path, progress: Progress) -> dict:
    """The batch runs of one checkpoint; returns (run, instance_id) -> exit status of the
    instance runs that ended in an error (to run again)."""
    logs = out / label / "logs"
    ids = [i["instance_id"] for i in dataset.instances]
    # --tasks: a trace knows its instance even where the prefix set has no prefix of it.
    serve = ["--backend", backend, "--label", label, "--log-dir", str(logs),
             "--tasks", str(dataset.file.resolve())]
    if args.prefixes:
        serve += ["--prefixes", str(Path(args.prefixes).resolve())]
    if args.backend_model:
        serve += ["--backend-model", args.backend_model]
    serve += args.serve_arg or []
    todo = []
    for run in range(args.runs):
        finished = set(preds_in(out / label / f"run-{run}"))
        todo.append([i for i in ids if i not in finished])
        progress.done_before += len(set(ids) & finished)
        progress.resumed += len(set(ids) & finished)
    if not any(todo):
        log(f"{label}: all {args.runs} runs of {len(ids)} instances already done")
        return {}
    check_backend(backend, f"checkpoint {label}")
    progress.title = f"{label}: building and starting the proxy"
    failed = {}
    with Proxy(serve, out / label / "proxy.log") as proxy:
        for run in range(args.runs):
            run_dir = out / label / f"run-{run}"
            if not todo[run]:
                continue
            drop_unfinished_traces(logs, run, set(ids) - set(todo[run]), dataset)
            progress.current, progress.title = run_dir, f"{label} run {run} ({run + 1} of {args.runs})"
            log(f"{label}: run {run} ({run + 1} of {args.runs}): {len(todo[run])} instances")
            run_scaffold(args, dataset, proxy.url, label, run, run_dir, todo[run])
            if args.scaffold == "mini":
                failed.update({(run, i): st for i, st in failed_instance_runs(run_dir, todo[run]).items()})
            drop_retried_first_requests(logs, run, dataset)
            progress.current = None
            progress.done_before += len(preds_in(run_dir)) - (len(ids) - len(todo[run]))
            write_predictions(out, label, run)
    return failed


def run_scaffold(args, dataset: Dataset, proxy_url: str, model: str, run: int, run_dir: Path,
                 instances: list[str]) -> None:
    """One batch run of --scaffold over `instances`, with the model named `openai/<model>`."""
    if args.scaffold == "mini":
        run_mini(args.python, dataset, proxy_url, model, run, run_dir, args.workers,
                 args.step_limit, instances, args.scaffold_arg or [], args.temperature)
    else:
        run_swe_agent(args.python, dataset, proxy_url, model, run, run_dir, args.workers,
                      args.step_limit, instances, args.scaffold_arg or [], args.temperature)


def write_predictions(out: Path, label: str, run: int) -> Path:
    preds = preds_in(out / label / f"run-{run}")
    rows = [{"instance_id": i, "model_name_or_path": label, "model_patch": p.get("model_patch") or ""}
            for i, p in sorted(preds.items())]
    path = out / label / "predictions" / f"run-{run}.jsonl"
    write_jsonl(path, rows)
    return path


# ---------------------------------------------------------------------------------------------
# Judges


def apply_patch(repo: Path, patch: str) -> tuple[bool, str]:
    """Applies a prediction as the SWE-bench harness does: `git apply`, else `patch --fuzz=5`
    on the clean tree. Returns whether it applied and the tools' output."""
    first = git("apply", "-v", "-", cwd=repo, input=patch, check=False)
    if first.returncode == 0:
        return True, first.stderr
    git("checkout", "-q", "--", ".", cwd=repo)
    git("clean", "-qfd", cwd=repo)
    if not shutil.which("patch"):
        return False, first.stderr
    second = subprocess.run(["patch", "--batch", "--fuzz=5", "-p1"], cwd=repo, input=patch,
                            capture_output=True, text=True)
    return second.returncode == 0, f"git apply:\n{first.stderr}\npatch --fuzz=5:\n{second.stdout}{second.stderr}"


def judge_local(dataset: Dataset, predictions: list[dict], logs: Path) -> dict:
    """SWE-bench's resolution rule, here: in a fresh clone at base_commit apply the prediction
    (`apply_patch`),
    restore the test files, apply test_patch, run the tests; resolved when every FAIL_TO_PASS
    and PASS_TO_PASS test passes. The report has the harness's keys."""
    report = {k: [] for k in ("submitted_ids", "completed_ids", "resolved_ids", "unresolved_ids",
                              "empty_patch_ids", "error_ids", "incomplete_ids")}
    predicted = {p["instance_id"]: p for p in predictions}
    for iid, inst in sorted(dataset.by_id.items()):
        pred = predicted.get(iid)
        if pred is None:
            report["incomplete_ids"].append(iid)
            continue
        report["submitted_ids"].append(iid)
        patch = pred.get("model_patch") or ""
        if not patch.strip():
            report["empty_patch_ids"].append(iid)
            continue
        case = logs / iid
        case.mkdir(parents=True, exist_ok=True)
        (case / "patch.diff").write_text(patch)
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            git("clone", "-q", inst["repo_path"], str(repo))
            git("checkout", "-q", inst["base_commit"], cwd=repo)
            applied, how = apply_patch(repo, patch if patch.endswith("\n") else patch + "\n")
            if not applied:
                (case / "report.txt").write_text(f"patch did not apply:\n{how}")
                report["error_ids"].append(iid)
                continue
            test_files = json.loads(inst.get("test_files") or "[]")
            if test_files:
                git("checkout", "-q", inst["base_commit"], "--", *test_files, cwd=repo)
            if inst.get("test_patch", "").strip():
                git("apply", "-", cwd=repo, input=inst["test_patch"])
            results, output = run_tests(repo, inst["test_command"])
        (case / "test_output.txt").write_text(output)
        wanted = json.loads(inst["FAIL_TO_PASS"]) + json.loads(inst["PASS_TO_PASS"])
        failing = [t for t in wanted if results.get(t) != "ok"]
        (case / "report.txt").write_text("resolved\n" if not failing else "failing: " + ", ".join(failing) + "\n")
        report["completed_ids"].append(iid)
        report["resolved_ids" if not failing else "unresolved_ids"].append(iid)
    report.update({
        "total_instances": len(dataset.by_id),
        "submitted_instances": len(report["submitted_ids"]),
        "completed_instances": len(report["completed_ids"]),
        "resolved_instances": len(report["resolved_ids"]),
        "unresolved_instances": len(report["unresolved_ids"]),
        "empty_patch_instances": len(report["empty_patch_ids"]),
        "error_instances": len(report["error_ids"]),
        "judge": "asap local judge (scripts/evaluate.py)",
    })
    return report


def judged_labels(out: Path) -> list[str]:
    """The labels of a results tree: folders with batch runs."""
    labels = sorted(p.name for p in out.iterdir() if p.is_dir() and any(p.glob("run-*")))
    if not labels:
        die(f"no label folders with runs (LABEL/run-<i>/) under {out}")
    return labels


def judge_stage(args, dataset: Dataset, label: str, out: Path) -> None:
    judge = args.judge or ("local" if dataset.local else "harness")
    runs = (range(args.runs) if args.runs else
            sorted(int(p.name.split("-")[1]) for p in (out / label).glob("run-*") if p.name.split("-")[1].isdigit()))
    for run in runs:
        target = out / label / "judge" / f"{label}.run{run}.json"
        preds_file = write_predictions(out, label, run)
        predictions = read_jsonl(preds_file)
        if not predictions:
            log(f"{label}: run {run}: no predictions yet; not judged")
            continue
        # Judged already, on these very predictions (a resumed run may have changed them).
        digest = hashlib.sha256(preds_file.read_bytes()).hexdigest()
        if target.is_file() and json.loads(target.read_text()).get("predictions_sha256") == digest:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        log(f"{label}: judging run {run} ({judge}, {len(predictions)} predictions)")
        if judge == "local":
            if not dataset.local:
                die("--judge local needs a local dataset (repo_path, test_command); use --judge harness")
            report = judge_local(dataset, predictions, out / label / "judge" / "logs" / f"run{run}")
        else:
            if subprocess.run([args.python, "-c", "import swebench"], capture_output=True).returncode:
                die(f"the SWE-bench harness is not installed for {args.python}: "
                    f"`{args.python} -m pip install swebench` (it needs Docker), or give --python")
            run_id = f"run{run}"
            command = [args.python, "-m", "swebench.harness.run_evaluation",
                       "--dataset_name", dataset.harness_dataset, "--split", dataset.split,
                       "--predictions_path", str(preds_file.resolve()),
                       "--max_workers", str(args.workers), "--run_id", run_id]
            subprocess.run(command, cwd=target.parent, check=True)
            produced = target.parent / f"{label.replace('/', '__')}.{run_id}.json"
            report = json.loads(produced.read_text())
        report["predictions_sha256"] = digest
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2))
        tmp.replace(target)
        log(f"{label}: run {run}: {len(report['resolved_ids'])}/{len(dataset.by_id)} resolved")


def report_stage(trees: list[Path], runs: int | None, extra: list[str] | None = None) -> int:
    """`asap-proxy report` over every label's traces and judged runs of the results trees (one
    tree, or the shards of one evaluation), as OUT/report.md, OUT/report.json and OUT/report.html
    of the first; `extra`: more `report` arguments (`--report-arg`)."""
    out = trees[0]
    logs = sorted({p for t in trees for p in t.glob("*/logs") if any(p.glob("*.jsonl"))})
    if not logs:
        die(f"no traces under {', '.join(f'{t}/*/logs' for t in trees)}")
    labels = sorted({p.parent.name for p in logs})
    results = sorted({str(f) for t in trees for f in t.glob("*/judge/*.run*.json")})
    base = [proxy_bin(), "report", *map(str, logs)]
    if results:
        base += ["--results", *results]
    # Pass@k for every k up to the runs (report's default: every k to each label's fewest runs).
    if runs:
        base += ["--k", ",".join(map(str, range(1, runs + 1)))]
    base += extra or []
    status = 0
    for fmt, name in (("md", "report.md"), ("json", "report.json")):
        page = ["--html", str(out / "report.html")] if fmt == "md" else []
        r = subprocess.run(base + ["--format", fmt, *page], capture_output=True, text=True)
        if r.returncode not in (0,):
            log(r.stderr)
            status = r.returncode
        (out / name).write_text(r.stdout)
        if fmt == "md":
            sys.stdout.write(r.stdout)
            if r.stderr.strip():
                log(r.stderr.strip())
    log(f"report: {out / 'report.md'}, {out / 'report.json'}, {out / 'report.html'} ({len(labels)} label{'s' * (len(labels) != 1)}, "
        f"{len(results)} judged run{'s' * (len(results) != 1)})")
    return status


# ---------------------------------------------------------------------------------------------
# Reference prefixes


def prefixes_command(args) -> int:
    out = Path(args.out)
    work = Path(args.work) if args.work else out.parent / (out.stem + ".work")
    dataset = Dataset(args.dataset, args.split, args.python, work, args.instances)
    sources = [str(p) for p in args.import_ or []]
    if not sources:
        if not args.instruct:
            die("give --instruct URL (an instruction-tuned model's chat API) or --import FILES")
        serve = ["--mode", "passthrough", "--backend", args.instruct, "--label", args.label,
                 "--log-dir", str(work / "logs"), "--tasks", str(dataset.file.resolve())]
        # The scaffold names the instruct model, so its trajectories (and the provenance of
        # the prefixes cut from them) say which model the reference runs came from.
        model = args.instruct_model or first_model(args.instruct) or "instruct-model"
        serve += ["--backend-model", model]
        run_dir = work / "run-0"
        finished = set(preds_in(run_dir))
        todo = [i for i in dataset.by_id if i not in finished]
        if todo:
            check_backend(args.instruct, "--instruct")
            drop_unfinished_traces(work / "logs", 0, finished, dataset)
            log(f"prefixes: reference runs of {len(todo)} instances with {args.instruct}")
            with Proxy(serve, work / "proxy.log") as proxy:
                run_scaffold(args, dataset, proxy.url, model, 0, run_dir, todo)
        # The scaffold's own trajectories: they carry the instance id (prefix build reads both).
        pattern = "**/*.traj.json" if args.scaffold == "mini" else "*/*.traj"
        sources = sorted(str(p) for p in run_dir.glob(pattern))
        if not sources:
            die(f"the reference runs left no trajectories under {run_dir}")
        failed = failed_instance_runs(run_dir, list(dataset.by_id)) if args.scaffold == "mini" else {}
        if failed:
            die(f"reference runs ended in an error for {', '.join(sorted(failed))} "
                f"({', '.join(sorted(set(failed.values())))}): run the same command again")
    gold = work / "gold.jsonl"
    write_jsonl(gold, [{"instance_id": i["instance_id"], "patch": i["patch"]} for i in dataset.instances])
    command = [proxy_bin(), "prefix", "build", "--k", str(args.k), "--gold", str(gold), "--out", str(out),
               "--from", *sources]
    return subprocess.run(command).returncode


# ---------------------------------------------------------------------------------------------


def first_model(base_url: str) -> str | None:
    """The first model id of `GET {base_url}/models`, if the backend answers."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/models", timeout=10) as r:
            return json.load(r)["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def checkpoints(values: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for v in values:
        label, sep, url = v.partition("=")
        if not sep or not label or not url.startswith(("http://", "https://", "replay:")):
            die(f"--checkpoint wants LABEL=URL (a completions API base URL), got {v!r}")
        # The label names folders and harness report files (<label>.run<i>.json).
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@+-]*", label):
            die(f"label {label!r}: use letters, digits and . _ @ + - (it names folders and files), "
                "e.g. stage2-end or qwen-7b@mini")
        pairs.append((label, url))
    if len({l for l, _ in pairs}) != len(pairs):
        die("two --checkpoint values share a label")
    return pairs


def run_command(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = args.stages.split(",") if args.stages != "all" else list(STAGES)
    if unknown := set(stages) - set(STAGES):
        die(f"unknown stages {sorted(unknown)} (known: {', '.join(STAGES)}, all)")
    pairs = checkpoints(args.checkpoint or [])
    if "agent" in stages and not pairs:
        die("give at least one --checkpoint LABEL=URL")
    dataset = Dataset(args.dataset, args.split, args.python, out / "_work", args.instances)
    if "agent" in stages and args.scaffold == "swe-agent" and args.runs > 1 and args.temperature is None:
        log("evaluate: warning: SWE-agent samples at temperature 0 unless told otherwise, so the "
            f"{args.runs} runs of a deterministic backend will be identical; give --temperature")
    if "agent" in stages and not args.prefixes:
        log("evaluate: warning: no --prefixes: every task gets the built-in demonstration, not a "
            "same-task prefix (the paper's protocol uses one prefix set for every checkpoint)")
    started = time.time()
    if "agent" in stages:
        progress = Progress(len(pairs) * args.runs * len(dataset.instances))
        failed = {}
        try:
            for label, url in pairs:
                failed.update({(label, *k): v for k, v in agent_stage(args, dataset, label, url, out, progress).items()})
        finally:
            progress.close()
        if progress.done_before > progress.resumed:
            log(progress.line())
        if failed:
            for (label, run, iid), status in sorted(failed.items()):
                log(f"{label}: run {run}: {iid} ended in an error ({status}); see OUT/{label}/run-{run}/**/{iid}")
            die(f"{len(failed)} instance runs ended in an error (exit status not one of "
                f"{', '.join(sorted(MINI_ENDINGS))}): nothing was judged. Fix the cause and run the "
                "same command again: those instance runs run again, the others are kept (exclude an "
                "instance that always fails with --instances).")
    if "judge" in stages:
        labels = [label for label, _ in pairs] or judged_labels(out)
        for label in labels:
            judge_stage(args, dataset, label, out)
    status = report_stage([out], args.runs, args.report_arg) if "report" in stages else 0
    log(f"evaluate: done in {(time.time() - started) / 60:.1f} min; results in {out}")
    return status


def fake_backend_bin() -> str:
    return built("fake-backend", "ASAP_FAKE_BACKEND_BIN")


DEMO_TASKS = ["slugify", "paginate", "tempconv"]


def demo(out: Path, python: str) -> int:
    """The documented commands on three bundled tasks, with the fake models of
    examples/evaluate/ (an instruct model for the reference runs, two base checkpoints): the
    workflow end to end without a GPU, Docker or network. Prints each command it runs."""
    # Build once here; the steps below run as child processes and reuse the binaries.
    os.environ["ASAP_PROXY_BIN"], os.environ["ASAP_FAKE_BACKEND_BIN"] = proxy_bin(), fake_backend_bin()
    fakes = []
    try:
        urls = {}
        for name in ("instruct", "stage1", "stage2"):
            proc = subprocess.Popen([fake_backend_bin(), "--port", "0", "agent", "--script",
                                     str(REPO / "examples" / "evaluate" / f"{name}.json")],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            fakes.append(proc)
            line = proc.stdout.readline().decode()
            if not line.startswith("PORT "):
                die(f"the fake {name} model did not start")
            urls[name] = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        me = [sys.executable, str(Path(__file__).resolve())]
        steps = [
            ["dataset", "--instances", ",".join(DEMO_TASKS), "--out", str(out / "dataset")],
            ["prefixes", "--dataset", str(out / "dataset"), "--instruct", urls["instruct"],
             "--out", str(out / "prefixes" / "demo.jsonl"), "--python", python],
            ["run", "--dataset", str(out / "dataset"), "--prefixes", str(out / "prefixes" / "demo.jsonl"),
             "--checkpoint", f"stage1={urls['stage1']}", "--checkpoint", f"stage2={urls['stage2']}",
             "--runs", "2", "--workers", "2", "--out", str(out / "results"), "--python", python],
        ]
        started = time.time()
        for step in steps:
            log("demo: $ scripts/evaluate.py " + " ".join(step))
            status = wait_child(me + step)
            if status != 0:
                return status
        log(f"demo: the three commands took {(time.time() - started) / 60:.1f} min; results in {out / 'results'}")
        return 0
    finally:
        for proc in fakes:
            proc.terminate()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, runs=True):
        p.add_argument("--dataset", required=True, help="verified, lite, full, a HF name, a local dataset dir or a task folder")
        p.add_argument("--split", default="test")
        p.add_argument("--workers", type=int, default=1, help="instances at once (default 1)")
        p.add_argument("--python", help="a Python with mini-swe-agent (default: this one, else scripts/venv.sh --mini); "
                       "--scaffold swe-agent: one with SWE-agent installed by pip install -e (default: this one)")
        p.add_argument("--step-limit", type=int, help="scaffold steps per instance (default: the scaffold's)")
        p.add_argument("--scaffold", choices=SCAFFOLDS, default="mini")
        p.add_argument("--temperature", type=float,
                       help="sampling temperature the scaffold sends (default: the scaffold's own; "
                            "SWE-agent's is 0, which makes repeated runs identical)")
        p.add_argument("--instances", metavar="REGEX", help="only instances whose id matches (a shard)")
        p.add_argument("--scaffold-arg", action="append", metavar="ARG",
                       help="one more argument for the scaffold's batch runner (repeatable; "
                            "write --scaffold-arg=-c for a value starting with -)")

    d = sub.add_parser("dataset", help="a local SWE-bench-format dataset from task folders")
    d.add_argument("--tasks", default=str(REPO / "examples" / "tasks"))
    d.add_argument("--out", required=True)
    d.add_argument("--instances", help="comma-separated task folder names (default: all)")

    m = sub.add_parser("demo", help="the whole workflow here, with fake instruct and base models")
    m.add_argument("--out", required=True)
    m.add_argument("--python", help="a Python with mini-swe-agent (default: this one, else scripts/venv.sh --mini)")

    p = sub.add_parser("prefixes", help="reference runs of an instruct model, cut into a prefix set")
    common(p)
    p.add_argument("--instruct", help="the instruct model's OpenAI chat API base URL (with /v1)")
    p.add_argument("--instruct-model", help="model name sent to it (default: its first /v1/models)")
    p.add_argument("--label", default="reference")
    p.add_argument("--import", dest="import_", nargs="+", help="existing trajectories instead of new runs")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--out", required=True, help="the prefix file to write (JSONL)")
    p.add_argument("--work", help="reference runs' folder (default: <out stem>.work next to --out)")

    r = sub.add_parser("run", help="evaluate checkpoints: agent runs, judge, report")
    r.add_argument("--out", required=True, help="the results tree")
    r.add_argument("--runs", type=int, default=1, help="runs per instance (default 1; the paper: 8)")
    common(r)
    r.add_argument("--checkpoint", action="append", metavar="LABEL=URL",
                   help="a label and its completions backend; repeat for a sweep")
    r.add_argument("--prefixes", help="the prefix set (a file from `prefixes`)")
    r.add_argument("--backend-model", help="model name sent to every backend")
    r.add_argument("--judge", choices=("local", "harness"), help="default: local for local datasets, else harness")
    r.add_argument("--serve-arg", action="append", help="one more `serve` argument (repeatable)")
    r.add_argument("--stages", default="all", help="comma-separated: agent, judge, report (default all)")
    r.add_argument("--report-arg", action="append", metavar="ARG",
                   help="one more argument for `asap-proxy report` (repeatable; write "
                        "--report-arg=--order for a value starting with -)")

    j = sub.add_parser("judge", help="only judge the predictions of a results tree")
    j.add_argument("--out", required=True, help="the results tree")
    j.add_argument("--dataset", required=True, help="the dataset the runs used")
    j.add_argument("--split", default="test")
    j.add_argument("--instances", metavar="REGEX", help="only instances whose id matches (a shard)")
    j.add_argument("--label", action="append", dest="checkpoint", metavar="LABEL",
                   help="only this label (repeatable; default: every label of the tree)")
    j.add_argument("--runs", type=int, help="runs 0..N-1 (default: every run-<i> folder)")
    j.add_argument("--judge", choices=("local", "harness"), help="default: local for local datasets, else harness")
    j.add_argument("--workers", type=int, default=1, help="harness workers (default 1)")
    j.add_argument("--python", help="the Python with the SWE-bench harness (default: this one)")

    o = sub.add_parser("report", help="only the report of one or more results trees")
    o.add_argument("--out", required=True, action="append",
                   help="a results tree (repeatable: the shards of one evaluation)")
    o.add_argument("--runs", type=int, help="runs per instance: Pass@k for k = 1 to this (default: every k to the fewest runs of a task)")
    o.add_argument("--report-arg", action="append", metavar="ARG",
                   help="one more argument for `asap-proxy report` (repeatable; write "
                        "--report-arg=--order for a value starting with -)")

    args = parser.parse_args(argv)
    if getattr(args, "runs", None) is not None and args.runs < 1:
        die("--runs must be at least 1")
    if getattr(args, "workers", 1) < 1:
        die("--workers must be at least 1")
    if args.command == "dataset":
        build_dataset(Path(args.tasks), Path(args.out), args.instances.split(",") if args.instances else None)
        return 0
    if args.command == "demo":
        return demo(Path(args.out), scaffold_python(args.python))
    if args.command == "report":
        return report_stage([Path(o) for o in args.out], args.runs, args.report_arg)
    if args.command == "judge":
        args.python = args.python or sys.executable
        dataset = Dataset(args.dataset, args.split, args.python, Path(args.out) / "_work", args.instances)
        for label in args.checkpoint or judged_labels(Path(args.out)):
            judge_stage(args, dataset, label, Path(args.out))
        return 0
    args.python = scaffold_python(args.python) if args.scaffold == "mini" else (args.python or sys.executable)
    if args.command == "prefixes":
        return prefixes_command(args)
    return run_command(args)


def interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    # SIGTERM (a job scheduler, `timeout`) stops like Ctrl-C: the proxy and the batch runners
    # this started are stopped too, and the same command resumes.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stop_children()
        log("evaluate: interrupted; what finished is kept: run the same command again to resume")
        sys.exit(130)

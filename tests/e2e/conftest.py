"""End-to-end fixtures: the real proxy binary in front of a real base model.

The model server is started outside pytest (scripts/e2e.sh starts llama-server with the
Gemma 3 270M base model) and named by ASAP_E2E_BACKEND, e.g. http://127.0.0.1:8091/v1.
Each test gets its own proxy process on a free loopback port and its own trace directory.
"""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TASK_TEMPLATE = REPO / "examples" / "tasks" / "slugify"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


class Proxy:
    """A running `asap-proxy serve`."""

    def __init__(self, backend, log_dir, extra_args=()):
        binary = os.environ.get("ASAP_PROXY_BIN", str(REPO / "target" / "debug" / "asap-proxy"))
        if not Path(binary).exists():
            raise FileNotFoundError(f"proxy binary {binary} missing: run cargo build first")
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_dir = Path(log_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASAP_")}
        self.stderr_path = self.log_dir.parent / f"proxy-{self.port}.stderr"
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--backend", backend,
             "--log-dir", str(self.log_dir), *extra_args],
            stdout=subprocess.DEVNULL, stderr=self.stderr, env=env,
        )
        wait_http(f"http://127.0.0.1:{self.port}/health", 30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()

    def proxy_errors(self):
        """Lines of the proxy's own log at ERROR level."""
        return [l for l in self.stderr_path.read_text(errors="replace").splitlines() if " ERROR " in l]

    def traces(self):
        """{session_file_name: [records]} of every trace file."""
        out = {}
        for f in sorted(self.log_dir.glob("*.jsonl")):
            out[f.name] = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
        return out


@pytest.fixture(scope="session")
def backend_url():
    url = os.environ.get("ASAP_E2E_BACKEND")
    if not url:
        pytest.fail("ASAP_E2E_BACKEND is not set: run the tests through scripts/e2e.sh")
    wait_http(url.rstrip("/").removesuffix("/v1") + "/health", 180)
    return url


@pytest.fixture
def proxy(backend_url, tmp_path):
    p = Proxy(backend_url, tmp_path / "logs")
    yield p
    p.stop()


@pytest.fixture
def task_repo(tmp_path):
    """A fresh git checkout of the bundled task (a bug with a failing unittest)."""
    import shutil

    repo = tmp_path / "task"
    shutil.copytree(TASK_TEMPLATE, repo)
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "task"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def check_replay_and_report(proxy):
    """The traces of a real run re-render and re-parse identically with the current code
    (`replay --check`), and `report` reads them."""
    binary = os.environ.get("ASAP_PROXY_BIN", str(REPO / "target" / "debug" / "asap-proxy"))
    replay = subprocess.run([binary, "replay", "--check", str(proxy.log_dir)],
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    report = subprocess.run([binary, "report", "--format", "json", str(proxy.log_dir)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout), report.stdout


def check_trace_complete(proxy, min_steps=1):
    """Every step record is complete: prompt, completion, parse outcome, and either a response
    in the scaffold's dialect or a nudge (a rejected completion generated again inside the
    same request). Returns the answered records: one per request."""
    traces = proxy.traces()
    assert traces, "no trace file written"
    steps = []
    for name, records in traces.items():
        assert records[0]["type"] == "session", name
        for r in records:
            # Version 3 exactly when a content reference names a part of a list content,
            # else 2 exactly when one keeps text around its range.
            refs = ((r["data"].get("request") or {}).get("content_refs")) or []
            parts = any("part" in c for c in refs)
            partial = any("before" in c or "after" in c for c in refs)
            assert r["v"] == (3 if parts else 2 if partial else 1), name
        previous = None
        for r in records[1:]:
            d = r["data"]
            if r["type"] == "nudge":
                assert previous is not None and previous["decision"] == "nudge", name
                assert d["kind"] in {"submit_before_edit", "repeated_action"} and d["hint"]
                continue
            if r["type"] == "terminate":
                assert previous is not None and previous["decision"] == "terminate", name
                continue
            assert r["type"] in {"step", "side_call"}, name
            previous = d
            assert d["error"] is None, f"proxy error in {name}: {d['error']}"
            assert d["prompt"]["sha256"] and d["prompt"]["bytes"] > 0
            if d["completion"] is None:
                continue  # a reply made without the model (Terminus confirmation)
            assert isinstance(d["completion"]["text"], str)
            if r["type"] == "side_call":
                continue
            parse = d["parse"]
            assert (parse["action"] is None) != (parse["error"] is None), parse
            if parse["error"] is not None:
                assert parse["error"]["class"] in {
                    "no_action", "unknown_tool", "unclosed_tag", "missing_parameter", "invalid_parameter"}
            if d["decision"] == "nudge":
                assert d["response"] is None
                continue
            response = d["response"]
            assert response["finish_reason"] in {"tool_calls", "stop", "length"}
            if response["tool_call"] is not None:
                json.loads(response["tool_call"]["function"]["arguments"])
            steps.append({**d, "time_ms": r["time_ms"], "session": r["session"]})
    check_replay_and_report(proxy)
    assert len(steps) >= min_steps, f"only {len(steps)} steps logged"
    assert not proxy.proxy_errors(), proxy.proxy_errors()
    return steps

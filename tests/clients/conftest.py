"""Harness for the real-client tests: the proxy binary in front of a fake base model.

Each test gets its own stack (fake backend + asap-proxy, both on loopback, both
fresh processes) through the ``start_stack`` factory fixture, so every test has
its own backend script, its own record of backend requests and its own trace
log directory. Nothing here touches any address other than 127.0.0.1.

Environment:
  ASAP_PROXY_BIN         path of the proxy binary (default: <repo>/target/debug/asap-proxy)
  ASAP_FAKE_BACKEND_BIN  path of the fake backend (default: <repo>/target/debug/fake-backend,
                         the `fake-backend` workspace crate; run.sh builds it)
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# LiteLLM fetches its model price map from the internet at import time unless
# told to use the bundled copy; CI has no network beyond package registries.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HEALTH_TIMEOUT_S = 30.0


def proxy_bin() -> Path:
    return Path(os.environ.get("ASAP_PROXY_BIN") or REPO / "target" / "debug" / "asap-proxy")


def fake_backend_bin() -> Path:
    return Path(os.environ.get("ASAP_FAKE_BACKEND_BIN") or REPO / "target" / "debug" / "fake-backend")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "<no log>"


def stop_process(proc: subprocess.Popen | None) -> None:
    """Stop one process we started, by its pid: SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@dataclass
class Stack:
    """One fake backend plus one proxy, started for a single test."""

    workdir: Path
    script: list
    # When set, no fake backend is started: the proxy answers from the trace logs there
    # (``--backend replay:<path>``).
    replay_from: Path | None = None
    # Extra `serve` flags, e.g. ["--context-length", "2000"].
    proxy_args: list = field(default_factory=list)
    backend: subprocess.Popen | None = None
    proxy: subprocess.Popen | None = None
    backend_port: int = 0
    proxy_port: int = 0
    record_path: Path = field(init=False)
    log_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.record_path = self.workdir / "backend-requests.jsonl"
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(exist_ok=True)

    # -- addresses -----------------------------------------------------------
    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def base_url(self) -> str:
        """What a client is given as its OpenAI base URL."""
        return f"{self.proxy_url}/v1"

    # -- what the backend saw ------------------------------------------------
    def backend_requests(self) -> list[dict]:
        """Every request body the fake backend received, in order."""
        if not self.record_path.exists():
            return []
        return [json.loads(line) for line in self.record_path.read_text().splitlines() if line.strip()]

    def completion_requests(self) -> list[dict]:
        return [r for r in self.backend_requests() if "prompt" in r]

    def prompts(self) -> list[str]:
        out = []
        for r in self.completion_requests():
            p = r["prompt"]
            if isinstance(p, list):  # a one-element batch is legal too
                assert len(p) == 1, f"expected one prompt per call, got {len(p)}"
                p = p[0]
            assert isinstance(p, str), f"prompt is not a string: {p!r}"
            out.append(p)
        return out

    def logs(self) -> str:
        return (
            f"--- proxy output (port {self.proxy_port}) ---\n{tail(self.workdir / 'proxy.log')}\n"
            f"--- fake backend stderr (port {self.backend_port}) ---\n{tail(self.workdir / 'backend.err')}\n"
        )

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> "Stack":
        if self.replay_from is None:
            self._start_backend()
        # A free port can be taken between our probe and the proxy's bind;
        # retry a few times rather than fail on that race.
        for _ in range(3):
            self.proxy_port = free_port()
            if self._start_proxy():
                return self
        raise RuntimeError("proxy did not come up\n" + self.logs())

    def _start_backend(self) -> None:
        script_path = self.workdir / "script.json"
        script_path.write_text(json.dumps(self.script))
        err = open(self.workdir / "backend.err", "wb")
        binary = fake_backend_bin()
        if not binary.exists():
            raise RuntimeError(
                f"fake backend not found at {binary}; run `cargo build -p fake-backend` or set ASAP_FAKE_BACKEND_BIN"
            )
        self.backend = subprocess.Popen(
            [str(binary), "--port", "0", "script",
             "--script", str(script_path), "--record", str(self.record_path)],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
        )
        err.close()
        ready, _, _ = select.select([self.backend.stdout], [], [], 15)
        line = self.backend.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            stop_process(self.backend)
            raise RuntimeError(f"fake backend did not report its port: {line!r}\n{self.logs()}")
        self.backend_port = int(line.split()[1])

    def _start_proxy(self) -> bool:
        binary = proxy_bin()
        if not binary.exists():
            raise RuntimeError(
                f"proxy binary not found at {binary}; run `cargo build` first or set ASAP_PROXY_BIN"
            )
        backend = (
            f"replay:{self.replay_from}"
            if self.replay_from is not None
            else f"http://127.0.0.1:{self.backend_port}/v1"
        )
        log = open(self.workdir / "proxy.log", "ab")
        # Hermetic: a developer's ASAP_* settings (flags' env fallbacks) must not leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASAP_")}
        env.setdefault("RUST_LOG", "info")
        self.proxy = subprocess.Popen(
            [str(binary), "serve",
             "--listen", f"127.0.0.1:{self.proxy_port}",
             "--backend", backend,
             "--log-dir", str(self.log_dir), *self.proxy_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )
        log.close()
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proxy.poll() is not None:
                return False  # exited (e.g. port taken): caller retries
            try:
                with urllib.request.urlopen(f"{self.proxy_url}/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        stop_process(self.proxy)
        raise RuntimeError(f"proxy /health not 200 within {HEALTH_TIMEOUT_S}s\n{self.logs()}")

    def stop(self) -> None:
        stop_process(self.proxy)
        stop_process(self.backend)
        if self.backend is not None and self.backend.stdout is not None:
            self.backend.stdout.close()


@pytest.fixture
def start_stack(tmp_path, request):
    """Factory: ``start_stack(["continuation 1", ...])`` → a running Stack.

    Every call starts a fresh backend and proxy; all are stopped at teardown.
    Their logs are printed at teardown, so a failing test shows them.
    ``start_stack([], replay_from=log_dir)`` starts only a proxy that replays
    the trace logs in ``log_dir`` (no backend at all).
    """
    stacks: list[Stack] = []

    def start(script: list, replay_from: Path | None = None, proxy_args: list | None = None) -> Stack:
        stack = Stack(workdir=tmp_path / f"stack{len(stacks)}", script=script, replay_from=replay_from,
                      proxy_args=list(proxy_args or []))
        stacks.append(stack)
        return stack.start()

    yield start
    for stack in stacks:
        stack.stop()
        print(stack.logs())


def raw_post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict | str]:
    """POST raw bytes; return (status, parsed JSON body or text)."""
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text

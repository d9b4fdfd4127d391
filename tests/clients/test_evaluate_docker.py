"""The Docker path of the evaluation workflow (docs/evaluate.md): one real SWE-bench Lite
instance, mini-swe-agent's batch runner in its Docker sandbox, the official SWE-bench harness,
`report`. The base model is `fake-backend constant`, which appends a line to the README every
turn: the proxy ends the run on the repeated action and submits, so the prediction is a
non-empty patch the harness applies and judges (unresolved).

Runs only where it can: a Docker engine that answers, the SWE-bench harness importable
(`pip install swebench`) in this Python, and ASAP_DOCKER_TESTS=1 (it pulls the dataset and
several GB of images). Not run in CI, which has no Docker engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, fake_backend_bin, proxy_bin, stop_process

INSTANCE = "astropy__astropy-12907"


def _ready() -> str | None:
    if os.environ.get("ASAP_DOCKER_TESTS") != "1":
        return "set ASAP_DOCKER_TESTS=1 to pull SWE-bench Lite and its images"
    if not shutil.which("docker") or subprocess.run(["docker", "info"], capture_output=True).returncode:
        return "no Docker engine"
    if subprocess.run([sys.executable, "-c", "import swebench"], capture_output=True).returncode:
        return "the SWE-bench harness is not installed (pip install swebench)"
    return None


@pytest.mark.skipif(_ready() is not None, reason=_ready() or "")
def test_one_swebench_instance_through_docker_and_the_harness(tmp_path):
    text = "I will note it.\n\n<bash>echo asap >> README.rst</bash>\n"
    fake = subprocess.Popen([str(fake_backend_bin()), "--port", "0", "constant", "--text", text],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        port = int(fake.stdout.readline().decode().split()[1])
        out = tmp_path / "results"
        env = dict(os.environ, ASAP_PROXY_BIN=str(proxy_bin()))
        result = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "evaluate.py"), "run", "--dataset", "lite",
             "--instances", f"^{INSTANCE}$", "--checkpoint", f"constant=http://127.0.0.1:{port}/v1",
             "--runs", "1", "--step-limit", "8", "--out", str(out), "--python", sys.executable],
            env=env, capture_output=True, text=True, timeout=3600)
        assert result.returncode == 0, result.stderr[-6000:]
    finally:
        stop_process(fake)
    judged = json.loads((out / "constant" / "judge" / "constant.run0.json").read_text())
    assert judged["submitted_ids"] == [INSTANCE], judged
    assert INSTANCE in judged["unresolved_ids"] + judged["error_ids"], judged
    report = json.loads((out / "report.json").read_text())
    assert [(t["instance_id"], t["run"]) for t in report["trajectories"]] == [(INSTANCE, 0)]
    assert report["labels"][0]["pass_at_k"]["1"] == 0

"""Claude Code itself (the npm package, headless print mode) through the proxy's Messages API.

Claude Code 2.1.332 needs Node 22; both come from the npm registry (the `node` package ships
the runtime) into ${ASAP_CACHE:-~/.cache/asap-proxy}/npm-claude-code, once. It runs
unmodified with `ANTHROPIC_BASE_URL` at the proxy, in a toy git repository whose `add()`
subtracts, against the scripted fake base model: look, fix with Claude Code's `Edit`, run the
test, answer. The fix must land in the file, Claude Code must end without an API error, the
proxy must trace one `claude-code` session, and `report` must see the edit, the test run and
the submission.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import proxy_bin

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
NODE = "node@22.23.3"
CACHE = Path(os.environ.get("ASAP_CACHE", Path.home() / ".cache" / "asap-proxy")) / "npm-claude-code"


def claude_bin() -> Path:
    """The `claude` launcher, installed into the cache on first use."""
    bin_dir = CACHE / "node_modules" / ".bin"
    stamp = CACHE / "installed.txt"
    wanted = f"{NODE} {CLAUDE_CODE}\n"
    if not (stamp.exists() and stamp.read_text() == wanted and (bin_dir / "claude").exists()):
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm not found: install Node.js and npm (apt-get install npm)")
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), NODE, CLAUDE_CODE],
                       check=True, timeout=600, capture_output=True)
        stamp.write_text(wanted)
    return bin_dir / "claude"


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (path / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "if __name__ == \"__main__\":\n    test_add()\n    print(\"1 passed\")\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=path, check=True)
    return path


def test_claude_code_fixes_a_bug_through_the_messages_api(start_stack, tmp_path):
    claude = claude_bin()
    repo = make_repo(tmp_path / "repo")
    script = [
        "I will look at the code first.\n<bash>cat calc.py</bash>\n",
        "add() subtracts. Fix it.\n<Edit>\n<file_path>%s</file_path>\n<old_string>a - b</old_string>\n"
        "<new_string>a + b</new_string>\n</Edit>\n" % (repo / "calc.py"),
        "Run the test.\n<bash>python3 test_calc.py</bash>\n",
        "The fix is in place.\n<submit/>\n",
    ]
    stack = start_stack(script)
    env = {
        **os.environ,
        "PATH": f"{claude.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        "ANTHROPIC_BASE_URL": stack.proxy_url,
        "ANTHROPIC_API_KEY": "x",
        # No telemetry, updates or error reports: CI reaches only the package registries.
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # CI runs as root, where Claude Code allows skipping permissions only in a sandbox.
        "IS_SANDBOX": "1",
    }
    run = subprocess.run(
        [str(claude), "-p", "The test in test_calc.py fails: add() in calc.py subtracts. Fix it.",
         "--dangerously-skip-permissions", "--output-format", "json"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    result = json.loads(run.stdout)
    assert result["is_error"] is False, result
    assert result["result"] == "The fix is in place.", result
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"

    traces = sorted(stack.log_dir.glob("*.jsonl"))
    assert len(traces) == 1, traces
    session = json.loads(traces[0].read_text().splitlines()[0])["data"]
    assert session["profile"] == "claude-code", session
    report = subprocess.run(
        [str(proxy_bin()), "report", str(stack.log_dir), "--format", "json"],
        capture_output=True, text=True, check=True)
    behaviour = json.loads(report.stdout)["trajectories"][0]["behaviour"]
    assert behaviour["turns"] == 4, behaviour
    assert behaviour["autonomous_edit"] is True, behaviour
    assert behaviour["active_testing"] is True, behaviour
    assert behaviour["explicit_submission"] is True, behaviour
    assert behaviour["failed_test"] is False, behaviour

#!/usr/bin/env bash
# Run the real-client tests (OpenAI SDK, LiteLLM) against the built proxy binary.
#
# Creates or reuses a virtualenv at ${ASAP_CACHE:-$HOME/.cache/asap-proxy}/venv-clients,
# rebuilt whenever tests/clients/requirements.txt changes (its sha256 is stamped in the
# venv), and mini-swe-agent 1.x (requirements-mini1.txt) in ${ASAP_CACHE}/mini-swe-agent-1. Needs only PyPI. The proxy binary comes from ASAP_PROXY_BIN or
# target/debug/asap-proxy (build it first); the fake backend from ASAP_FAKE_BACKEND_BIN or,
# built here, target/debug/fake-backend (the `fake-backend` workspace crate). Extra arguments
# go to pytest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${ASAP_CACHE:-$HOME/.cache/asap-proxy}"
venv="$cache/venv-clients"
python="${PYTHON:-python3}"

want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
if [[ "$want" != "$have" || ! -x "$venv/bin/python" ]]; then
    echo "run.sh: creating $venv" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$venv/.requirements.sha256"
fi

# mini-swe-agent 1.x beside the venv's 2.x: its own --target folder (same stamp scheme).
mini1="$cache/mini-swe-agent-1"
want1="$(sha256sum "$here/requirements-mini1.txt" | cut -d' ' -f1)"
have1="$(cat "$mini1/.requirements.sha256" 2>/dev/null || true)"
if [[ "$want1" != "$have1" ]]; then
    echo "run.sh: installing mini-swe-agent 1.x into $mini1" >&2
    rm -rf "$mini1"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$mini1" -r "$here/requirements-mini1.txt"
    echo "$want1" > "$mini1/.requirements.sha256"
fi
export ASAP_MINI1_PATH="$mini1"

if [[ -z "${ASAP_FAKE_BACKEND_BIN:-}" ]]; then
    (cd "$repo" && cargo build --locked --quiet --bin fake-backend)
    export ASAP_FAKE_BACKEND_BIN="$repo/target/debug/fake-backend"
fi

# LiteLLM would otherwise fetch its model price map from the internet at import.
export LITELLM_LOCAL_MODEL_COST_MAP=True
cd "$repo"
set +e
"$venv/bin/python" -m pytest -q tests/clients "$@"
status=$?
set -e
exit "$status"

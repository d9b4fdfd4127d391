#!/usr/bin/env bash
# Runs the end-to-end tests (real scaffolds, real base model) with a cached Python 3.12 venv at
# ${ASAP_CACHE:-$HOME/.cache/asap-proxy}/venv-e2e, rebuilt when requirements.txt changes.
# Expects ASAP_E2E_BACKEND (a running completion backend) and ASAP_PROXY_BIN; scripts/e2e.sh
# sets both. Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${ASAP_CACHE:-$HOME/.cache/asap-proxy}"
venv="$cache/venv-e2e"

find_python312() {
    local c
    for c in "${ASAP_PYTHON312:-}" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
             "$(command -v python3.12 || true)" /usr/bin/python3.12 /usr/local/bin/python3.12; do
        if [[ -n "$c" && -x "$c" ]] && "$c" -c 'import sys, venv; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            echo "$c"; return 0
        fi
    done
    return 1
}

mkdir -p "$cache"
# One venv build at a time (parallel runs would delete each other's venv).
exec 9>"$cache/venv-e2e.lock"
flock 9
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
if [[ "$want" != "$have" || ! -x "$venv/bin/python" ]]; then
    python312="$(find_python312)" || { echo "run.sh: Python 3.12 is required (openhands-sdk); set ASAP_PYTHON312" >&2; exit 1; }
    echo "e2e: creating $venv with $python312 (first run: a few minutes)" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python312" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$venv/.requirements.sha256"
fi
flock -u 9

export LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_COST_TRACKING=ignore_errors MSWEA_CONFIGURED=true
cd "$repo"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/e2e "$@"

#!/usr/bin/env bash
# Runs the end-to-end tests (real scaffolds, real base model) with a cached Python 3.12 venv at
# ${ASAP_CACHE:-$HOME/.cache/asap-proxy}/venv-e2e, rebuilt when requirements.txt changes.
# Expects ASAP_E2E_BACKEND (a running completion backend) and ASAP_PROXY_BIN; scripts/e2e.sh
# sets both. Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

# The venv (Python 3.12, tests/e2e/requirements.txt, cached and locked) comes from
# scripts/venv.sh, which the quick start shares.
python="$(bash "$repo/scripts/venv.sh")"

export LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_COST_TRACKING=ignore_errors MSWEA_CONFIGURED=true OPENHANDS_SUPPRESS_BANNER=1
cd "$repo"
"$python" -m pytest -q -p no:cacheprovider tests/e2e "$@"

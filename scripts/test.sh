#!/usr/bin/env bash
# The project's test command (README): static checks of deploy/ (seconds; deploy/check.sh);
# Rust unit, golden and HTTP tests; the real-client tests
# (the `openai` SDK and LiteLLM driving the proxy over loopback); then the end-to-end tests
# (real scaffolds on the real base model, scripts/e2e.sh; skipped with ASAP_SKIP_E2E=1).
# Between them, the trajectory viewer in headless Chromium (tests/browser/run.sh; skipped
# with ASAP_SKIP_BROWSER=1).
# Needs: the Rust toolchain, python3 with venv (and Python 3.12 for openhands-sdk), chromium
# (Debian's package), PyPI access on first run (cached in ~/.cache/asap-proxy after).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== deploy/ (Dockerfile lint, Compose and Kubernetes schemas)" >&2
bash deploy/check.sh

echo "== cargo test" >&2
cargo test --locked

echo "== real clients (openai, litellm)" >&2
cargo build --locked --bin asap-proxy --bin fake-backend
ASAP_PROXY_BIN="$PWD/target/debug/asap-proxy" ASAP_FAKE_BACKEND_BIN="$PWD/target/debug/fake-backend" \
    bash tests/clients/run.sh

if [[ "${ASAP_SKIP_BROWSER:-0}" != "1" ]]; then
    echo "== trajectory viewer in headless Chromium (screenshots: target/artifacts/)" >&2
    ASAP_PROXY_BIN="$PWD/target/debug/asap-proxy" bash tests/browser/run.sh
fi

if [[ "${ASAP_SKIP_E2E:-0}" != "1" ]]; then
    echo "== end-to-end: real scaffolds on the real base model" >&2
    bash scripts/e2e.sh
fi

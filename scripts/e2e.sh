#!/usr/bin/env bash
# End-to-end tests against the real small base model: installs and starts llama-server with
# Gemma 3 270M base (scripts/model-server.sh, cached in ~/.cache/asap-proxy), builds the
# proxy, runs tests/e2e (real mini-swe-agent, openhands-sdk, openai SDK), and stops the model
# server by pid on exit. With --backend URL, uses that backend instead of starting one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
backend=""
if [[ "${1:-}" == "--backend" ]]; then backend="$2"; shift 2; fi

port=""
cleanup() {
    if [[ -n "$port" ]]; then scripts/model-server.sh stop --port "$port" >&2 || true; fi
}
trap cleanup EXIT INT TERM

if [[ -z "$backend" ]]; then
    echo "== e2e: model server (first run builds llama-server: up to ~15 min on 2 cores)" >&2
    start=$SECONDS
    scripts/model-server.sh install >/dev/null
    echo "   installed in $((SECONDS - start)) s" >&2
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    scripts/model-server.sh start --port "$port" >/dev/null
    backend="http://127.0.0.1:$port/v1"
fi

cargo build --locked --bin asap-proxy --bin fake-backend
export ASAP_E2E_BACKEND="$backend" ASAP_PROXY_BIN="$PWD/target/debug/asap-proxy"
export ASAP_FAKE_BACKEND_BIN="$PWD/target/debug/fake-backend"
start=$SECONDS
bash tests/e2e/run.sh "$@"
echo "== e2e: tests took $((SECONDS - start)) s" >&2

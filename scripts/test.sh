#!/usr/bin/env bash
# The project's test command (README "Tests"): Rust unit, golden and HTTP tests, then the
# real-client tests (the `openai` SDK and LiteLLM driving the proxy over loopback).
# Needs: the Rust toolchain, python3 with venv, PyPI access on first run (cached after).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== cargo test" >&2
cargo test --locked

echo "== real clients (openai, litellm)" >&2
cargo build --locked --bin asap-proxy
ASAP_PROXY_BIN="$PWD/target/debug/asap-proxy" bash tests/clients/run.sh

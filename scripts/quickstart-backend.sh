#!/usr/bin/env bash
# quickstart-backend.sh — the quick start against any OpenAI-completions backend you run
# yourself (vLLM, SGLang, llama-server, TGI, Ollama): no bundled model server is started.
#
# Usage: scripts/quickstart-backend.sh --backend URL [--steps N] [--run-dir DIR] [-- PROXY_ARGS...]
#   e.g. vllm serve Qwen/Qwen3-0.6B-Base --port 8000 --max-model-len 32768 --enable-prefix-caching
#        scripts/quickstart-backend.sh --backend http://127.0.0.1:8000/v1
#   PROXY_ARGS go to `asap-proxy serve`, e.g. -- --backend-model Qwen/Qwen3-0.6B-Base
# See scripts/quickstart.sh for the rest.
set -euo pipefail
for a in "$@"; do
    [[ "$a" == "--" ]] && break
    if [[ "$a" == "--backend" ]]; then exec "$(dirname "${BASH_SOURCE[0]}")/quickstart.sh" "$@"; fi
    if [[ "$a" == "-h" || "$a" == "--help" ]]; then sed -n '2,9p' "$0"; exit 0; fi
done
echo "quickstart-backend: --backend URL is required (e.g. http://127.0.0.1:8000/v1)" >&2
exit 2

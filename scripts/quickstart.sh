#!/usr/bin/env bash
# quickstart.sh — the whole path on a real base model, in a few minutes:
#   real base model (Gemma 3 270M base on llama-server, or --backend URL)
#   → asap-proxy serve → real mini-swe-agent (tool calling, local environment)
#   on the bundled task examples/tasks/slugify (a bug with a failing test)
#   → a summary of what happened (steps, actions, parse failures, tests, trace files).
#
# Usage: scripts/quickstart.sh [--steps N] [--max-tokens N] [--backend URL] [--run-dir DIR] [-- PROXY_ARGS...]
#   --steps N       mini-swe-agent step limit (default 6)
#   --max-tokens N  max_tokens mini asks for per call (default 512: a step that has not written
#                   an action by then rarely does later, and CPU generation is ~60 tokens/s)
#   --backend URL   use this completion backend (…/v1) instead of starting the bundled model
#   --run-dir DIR   where the trace, task copy and logs go (default ./asap-quickstart/<time>)
#   PROXY_ARGS      extra `asap-proxy serve` flags, e.g. -- --backend-model NAME --max-tokens 512
#
# Installs into ${ASAP_CACHE:-$HOME/.cache/asap-proxy} (model server: scripts/model-server.sh;
# Python venv with mini-swe-agent: scripts/venv.sh --mini) and builds the proxy with cargo.
# First run on an empty cache: the model server may need a ~15 min source build on 2 cores;
# afterwards it takes a couple of minutes. Everything it starts is stopped on exit and on Ctrl-C.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

steps=6
max_tokens=512
backend=""
run_dir=""
proxy_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) steps="$2"; shift 2 ;;
        --backend) backend="$2"; shift 2 ;;
        --run-dir) run_dir="$2"; shift 2 ;;
        --) shift; proxy_args=("$@"); break ;;
        --max-tokens) max_tokens="$2"; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "quickstart: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for n in "$steps" "$max_tokens"; do
    [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "quickstart: --steps and --max-tokens need a positive number" >&2; exit 2; }
done

t0=$SECONDS
phase_start=$SECONDS
times=()
say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }
done_phase() { local s=$((SECONDS - phase_start)); times+=("$1 ${s}s"); say "   $1: ${s} s"; phase_start=$SECONDS; }
die() { echo "quickstart: error: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() {  # wait_http URL SECONDS
    python3 - "$1" "$2" <<'EOF'
import sys, time, urllib.request
url, deadline = sys.argv[1], time.time() + float(sys.argv[2])
while time.time() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(1)
EOF
}

model_port=""
proxy_pid=""
agent_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
        kill -TERM "$agent_pid" 2>/dev/null || true
        wait "$agent_pid" 2>/dev/null || true
    fi
    if [[ -n "$proxy_pid" ]]; then
        kill -TERM "$proxy_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$proxy_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$proxy_pid" 2>/dev/null || true
        wait "$proxy_pid" 2>/dev/null || true
        echo "quickstart: stopped asap-proxy (pid $proxy_pid)" >&2
    fi
    if [[ -n "$model_port" ]]; then
        scripts/model-server.sh stop --port "$model_port" >/dev/null 2>&1 || true
        echo "quickstart: stopped the model server on port $model_port" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "quickstart: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

command -v python3 >/dev/null || die "python3 is required"
command -v git >/dev/null || die "git is required"
command -v cargo >/dev/null || die "cargo is required (Rust 1.85+, https://rustup.rs)"

run_dir="${run_dir:-$repo/asap-quickstart/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"
say "quickstart: run folder $run_dir"

say "1/6 building asap-proxy (cargo build --release --locked)"
cargo build --release --locked --bin asap-proxy || die "cargo build failed"
proxy_bin="$repo/target/release/asap-proxy"
done_phase build

if [[ -z "$backend" ]]; then
    say "2/6 model server: Gemma 3 270M base on llama-server (first run installs; may build llama-server for ~15 min)"
    scripts/model-server.sh install >/dev/null
    model_port="$(free_port)"
    model_pid="$(scripts/model-server.sh start --port "$model_port")"
    backend="http://127.0.0.1:$model_port/v1"
    say "   llama-server pid $model_pid at $backend"
else
    say "2/6 backend $backend (not starting a model server)"
    wait_http "${backend%/}/models" 30 || die "backend $backend does not answer GET /models"
fi
done_phase model-server

say "3/6 Python venv with mini-swe-agent (scripts/venv.sh --mini)"
python="$(scripts/venv.sh --mini)"
say "   $python"
done_phase venv

say "4/6 starting asap-proxy in front of $backend"
proxy_port="$(free_port)"
"$proxy_bin" serve --listen "127.0.0.1:$proxy_port" --backend "$backend" --log-dir "$run_dir/logs" \
    ${proxy_args[@]+"${proxy_args[@]}"} >"$run_dir/proxy.log" 2>&1 &
proxy_pid=$!
wait_http "http://127.0.0.1:$proxy_port/health" 30 \
    || { tail -5 "$run_dir/proxy.log" >&2; die "asap-proxy did not start (log: $run_dir/proxy.log)"; }
base_url="http://127.0.0.1:$proxy_port/v1"
say "   asap-proxy pid $proxy_pid at $base_url, traces in $run_dir/logs"

task="$run_dir/task"
cp -r examples/tasks/slugify "$task"
git -C "$task" init -q
git -C "$task" add -A
git -C "$task" -c user.email=quickstart@example.invalid -c user.name=quickstart commit -qm "task"
done_phase proxy+task

say "5/6 running mini-swe-agent (step limit $steps, max_tokens $max_tokens) on $task"
sed 's/^/   | /' "$task/TASK.md" >&2
set +e
"$python" scripts/run_mini.py --base-url "$base_url" --task-dir "$task" --task-file "$task/TASK.md" \
    --step-limit "$steps" --max-tokens "$max_tokens" --output "$run_dir/trajectory.json" >"$run_dir/mini.out" &
agent_pid=$!
wait "$agent_pid"
agent_rc=$?
agent_pid=""
set -e
cat "$run_dir/mini.out"
done_phase agent
[[ $agent_rc == 0 ]] || say "   mini-swe-agent crashed (exit $agent_rc): see above and $run_dir/proxy.log"

say "6/6 summary"
python3 scripts/summarize_trace.py "$run_dir/logs" --proxy-bin "$proxy_bin" --task-dir "$task" --test-cmd "python3 -m unittest -q"
echo "mini-swe-agent trajectory: $run_dir/trajectory.json"
echo "proxy log: $run_dir/proxy.log"
echo "browse the trajectory: $proxy_bin view $run_dir/logs  (then open http://127.0.0.1:8200/ui)"
done_phase summary
say "quickstart finished in $((SECONDS - t0)) s (${times[*]})"
exit "$agent_rc"

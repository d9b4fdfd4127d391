#!/usr/bin/env bash
# Instructions per request of the proxy, by path (issue 23; see BENCHMARKS.md).
#
# Wall-clock CPU time on a shared two-core VM drifts by ±25 % between runs of one binary, so a
# change of a few percent cannot be seen in bench/load.sh. This script counts what the CPU
# executes instead: each configuration runs the proxy under valgrind's callgrind (user-space
# instructions, `Ir`), sends warm-up requests with oha, zeroes the counters, sends N requests
# (c=1, zero-latency mock) and reads the total. Counts repeat within ±1 % between runs.
#
# Paths as in bench/load.sh: `ids` the next turns of running sessions (examples/bench_turns.rs:
# 4 rollouts, each sending its next turns in order after a warm-up turn),
# `foreign`, `parts`, `mini`, `terminus` a request that opens a session no process has seen
# (bench_turns --openings: 256 rollouts' bodies, a tag of the request's own in every message),
# `mini-run`, `terminus-run` the next turns of running sessions of those id-less dialects
# (bench_turns --dialect: each history holds the proxy's own last reply; a second mock numbers
# its answers so that no two are equal).
# SHA-256 is reported apart: valgrind's CPU has no SHA extensions, so the hash runs in its
# software form there (about ten times the instructions of the SHA-NI form the proxy uses on
# x86 machines that have it); the `w/o SHA-256` column leaves its compression function out.
#
# Usage: bench/instructions.sh [--quick]
# Env:   PROXY_BIN=path (default target/release/asap-proxy)  BASE_BIN=path (a second build,
#        e.g. the one before a change: its counts and the change are added to the table)
#        OHA=path/to/oha  MOCK_PORT=19301  PROXY_PORT=19302  NUMBERED_PORT=19303 (the
#        numbering mock)
#        PATHS='mini-run terminus-run' (only the rows of these paths)
#        SERVE_FLAGS='--render-cache-mib 0' (more `serve` flags for both builds, word-split)
# Needs: valgrind (callgrind_control), oha (installed as bench/load.sh installs it), python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=0
[[ "${1:-}" == "--quick" ]] && QUICK=1
MOCK_PORT=${MOCK_PORT:-19301}
PROXY_PORT=${PROXY_PORT:-19302}
NUMBERED_PORT=${NUMBERED_PORT:-19303}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cache/asap-proxy/bin/oha")}
for tool in valgrind callgrind_control callgrind_annotate python3 curl "$OHA"; do
    command -v "$tool" >/dev/null || { echo "bench/instructions.sh: needs $tool" >&2; exit 1; }
done

echo "== cargo build --release (proxy, mock backend, body generator)" >&2
cargo build --release --locked --bin asap-proxy --bin fake-backend --example bench_bodies \
    --example bench_turns >&2
PROXY_BIN=${PROXY_BIN:-target/release/asap-proxy}
BASE_BIN=${BASE_BIN:-}

# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_work asap-instr
bench_bodies

target/release/fake-backend --port "$MOCK_PORT" constant --delay-ms 0 >/dev/null 2>"$WORK/mock.log" &
PIDS+=($!)
target/release/fake-backend --port "$NUMBERED_PORT" constant --delay-ms 0 --numbered \
    >/dev/null 2>"$WORK/numbered.log" &
PIDS+=($!)
wait_http "http://127.0.0.1:$MOCK_PORT/health"
wait_http "http://127.0.0.1:$NUMBERED_PORT/health"

# send FLAG BODY N [--warm-only|--skip-warm]: N requests of BODY with oha (FLAG -D or -Z),
# or (FLAG `turns:DIALECT`) the next turns of 4 rollouts of BODY turns, N / 4 each, with
# bench_turns, or (FLAG `openings`) N openings never seen, made from BODY's templates
# (bench_turns --openings; the warm-up sends 5).
send() {
    local flag=$1 body=$2 n=$3 url="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
    if [[ $flag == openings ]]; then
        target/release/examples/bench_turns --url "$url" --openings "$body" --requests "$n" \
            --warm-requests 5 "$4"
    elif [[ $flag == turns:* ]]; then
        target/release/examples/bench_turns --url "$url" --turns "$body" --sessions 4 \
            --rounds $((n / 4)) --dialect "${flag#turns:}" --state "$WORK/replies.json" "$4"
    elif [[ $4 == --warm-only ]]; then
        "$OHA" --no-tui --output-format json -m POST -H 'content-type: application/json' \
            -c 1 -n 5 "$flag" "$body" "$url"
    else
        "$OHA" --no-tui --output-format json -m POST -H 'content-type: application/json' \
            -c 1 -n "$n" "$flag" "$body" "$url"
    fi
}

# count BIN FLAG BODY N: prints "Ir_per_request sha_Ir_per_request" for N requests.
# A content dialect's running sessions are answered by the numbering mock.
count() {
    local bin=$1 flag=$2 body=$3 n=$4 out="$WORK/cg" pid file port=$MOCK_PORT
    [[ $flag == turns:mini || $flag == turns:terminus ]] && port=$NUMBERED_PORT
    rm -rf "$WORK/logs" "$out".*
    valgrind --tool=callgrind --callgrind-out-file="$out.%p" "$bin" serve \
        --listen "127.0.0.1:$PROXY_PORT" --backend "http://127.0.0.1:$port/v1" \
        --backend-model mock --log-dir "$WORK/logs" --max-steps 100000 \
        --prefixes "$WORK/no-prefixes" ${SERVE_FLAGS:-} 2>"$WORK/valgrind.log" &
    pid=$!
    PIDS+=("$pid")
    wait_http "http://127.0.0.1:$PROXY_PORT/health" 60
    send "$flag" "$body" "$n" --warm-only >/dev/null
    callgrind_control -z "$pid" >/dev/null
    send "$flag" "$body" "$n" --skip-warm >"$WORK/oha.json"
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    # The dump taken after zeroing: the file with a part number.
    file=$(ls -t "$out.$pid".* | head -1)
    # Self cost per function (callgrind_annotate's default): the SHA-256 compression apart.
    callgrind_annotate --threshold=100 "$file" >"$WORK/annotate.txt"
    python3 - "$WORK/annotate.txt" "$n" "$WORK/oha.json" <<'EOF'
import json, re, sys
n = int(sys.argv[2])
report = json.load(open(sys.argv[3]))
# oha's report, or bench_turns' (answers `ok` of `total`, every 2xx).
codes = report.get("statusCodeDistribution") or {"200": report["ok"], "other": report["total"] - report["ok"]}
codes = {k: v for k, v in codes.items() if v}
if codes != {"200": n}:
    sys.exit(f"bench/instructions.sh: answers {codes}, expected {n} times 200")
total = sha = 0
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
    if not m:
        continue
    ir = int(m.group(1).replace(",", ""))
    if "PROGRAM TOTALS" in m.group(2):
        total = ir
    elif "sha2::sha256::" in m.group(2):
        sha += ir
print(total // n, sha // n)
EOF
}

if [[ $QUICK == 1 ]]; then N_SHORT=50; N_LONG=10; else N_SHORT=200; N_LONG=40; fi
CONFIGS=(
    "ids 2 turns:ids 2 32"
    "ids 20 turns:ids 20 32"
    "ids 100 turns:ids 100 32"
    "ids 1000 turns:ids 1000 8"
    "foreign 20 openings $B/foreign-20.jsonl $N_LONG"
    "foreign 100 openings $B/foreign-100.jsonl $N_LONG"
    "parts 20 openings $B/parts-20.jsonl $N_LONG"
    "parts 100 openings $B/parts-100.jsonl $N_LONG"
    "mini 20 openings $B/mini-20.jsonl $N_LONG"
    "mini 100 openings $B/mini-100.jsonl $N_LONG"
    "terminus 20 openings $B/terminus-20.jsonl $N_LONG"
    "terminus 100 openings $B/terminus-100.jsonl $N_LONG"
    "mini-run 20 turns:mini 20 32"
    "mini-run 100 turns:mini 100 32"
    "terminus-run 20 turns:terminus 20 32"
    "terminus-run 100 turns:terminus 100 32"
)

fmt() { python3 -c "import sys; print(f'{int(sys.argv[1]):,}')" "$1"; }
if [[ -n $BASE_BIN ]]; then
    echo "| path | turns | base Ir/request | Ir/request | change | base w/o SHA-256 | w/o SHA-256 | change |"
    echo "|---|---|---|---|---|---|---|---|"
else
    echo "| path | turns | Ir/request | of which SHA-256 (software) | w/o SHA-256 |"
    echo "|---|---|---|---|---|"
fi
for config in "${CONFIGS[@]}"; do
    read -r path turns flag body n <<<"$config"
    [[ -n ${PATHS:-} && " $PATHS " != *" $path "* ]] && continue
    echo "== $path, $turns turns ($n requests)" >&2
    read -r ir sha < <(count "$PROXY_BIN" "$flag" "$body" "$n")
    if [[ -n $BASE_BIN ]]; then
        read -r bir bsha < <(count "$BASE_BIN" "$flag" "$body" "$n")
        python3 - "$path" "$turns" "$bir" "$bsha" "$ir" "$sha" <<'EOF'
import sys
path, turns, bir, bsha, ir, sha = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
pct = lambda a, b: f"{(b - a) / a * 100:+.1f} %"
print(f"| {path} | {turns} | {bir:,} | {ir:,} | {pct(bir, ir)} | {bir - bsha:,} | {ir - sha:,} | {pct(bir - bsha, ir - sha)} |")
EOF
    else
        echo "| $path | $turns | $(fmt "$ir") | $(fmt "$sha") | $(fmt $((ir - sha))) |"
    fi
done

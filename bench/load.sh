#!/usr/bin/env bash
# Load benchmark of the proxy (issue 8, parts 2 and 3; see BENCHMARKS.md).
#
# Builds release binaries, starts the zero-latency mock backend (`fake-backend constant`, the
# fake-backend/ workspace crate) pinned to CPU 1 and the proxy pinned to CPU 0, generates SWE-agent-shaped bodies of 2, 20,
# 100 and 1,000 turns (examples/bench_bodies.rs; also, at 20 and 100 turns, the paths that
# open a session on every request: foreign tool-call ids and mini-swe-agent's text mode, and
# the next turns of running id-less sessions of mini-swe-agent and Terminus-2), and
# measures with oha (pinned to CPU 1,
# with the mock): direct-to-mock (the completions body the proxy would send) against
# through-the-proxy (the chat body), at concurrency 1 (mock delay 0) and 32 (mock delay
# 20 ms), non-streaming and streaming, each `ids` row beside a `relay` row (the direct body
# through examples/bench_relay.rs, the proxy's HTTP parts doing no work: the transport floor).
# Records p50/p99 latency, requests/s, the proxy's CPU
# time per request (utime+stime from /proc/<pid>/stat) and its peak RSS (VmHWM), then a
# 1,000-turn single-request timing and the RSS with 256 concurrent 100-turn requests in
# flight. Prints a Markdown report and writes it to bench/results/<date>.md.
#
# Usage: bench/load.sh [--quick|--rss]  (--quick: fewer requests, for a smoke test;
#                                        --rss: only the 256-concurrent RSS step, no report)
#        bench/load.sh --row TURNS STREAM(yes|no) C ROUTE...  (only these rows, one per
#        ROUTE, mock delay 0 ms at c=1 and 20 ms above; printed, no report; ROUTE as below)
# Env:   OHA=path/to/oha  MOCK_PORT=19001  PROXY_PORT=19002  RESULTS=bench/results
#        PROXY_BIN=path (default target/release/asap-proxy: the proxy measured, e.g. an
#        older build for a before/after run with the same bodies, mock and client)
#        PROXY_ENV='NAME=value ...' (extra environment for the proxy, e.g. malloc tunables)
#        RSS_FLAGS='--flag value ...' (extra serve flags for the RSS step's proxies, e.g.
#        --message-cache-mib 128)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=0
RSS_ONLY=0
[[ "${1:-}" == "--quick" ]] && QUICK=1
[[ "${1:-}" == "--rss" ]] && RSS_ONLY=1
ROWS_ONLY=()
if [[ "${1:-}" == "--row" ]]; then
    [[ $# -ge 5 ]] || { echo "usage: bench/load.sh --row TURNS STREAM C ROUTE..." >&2; exit 2; }
    ROWS_ONLY=("${@:2}")
fi
MOCK_PORT=${MOCK_PORT:-19001}
PROXY_PORT=${PROXY_PORT:-19002}
RESULTS=${RESULTS:-bench/results}
CACHE_BIN="$HOME/.cache/asap-proxy/bin"
PROXY_CPU=0
CLIENT_CPU=1

# --- oha --------------------------------------------------------------------------------
OHA=${OHA:-}
if [[ -z "$OHA" ]]; then
    if command -v oha >/dev/null; then
        OHA=$(command -v oha)
    elif [[ -x "$CACHE_BIN/oha" ]]; then
        OHA="$CACHE_BIN/oha"
    else
        echo "== installing oha into $CACHE_BIN (cargo install oha --locked)" >&2
        if ! cargo install oha --locked --root "$HOME/.cache/asap-proxy" >&2; then
            echo "bench/load.sh: oha could not be installed (cargo install oha --locked failed);" \
                "install it and pass OHA=/path/to/oha" >&2
            exit 1
        fi
        OHA="$CACHE_BIN/oha"
    fi
fi
for tool in taskset python3 curl; do
    command -v "$tool" >/dev/null || { echo "bench/load.sh: needs $tool" >&2; exit 1; }
done

echo "== cargo build --release (proxy, mock backend, body generator)" >&2
cargo build --release --locked --bin asap-proxy --bin fake-backend --example bench_bodies \
    --example bench_turns --example bench_relay >&2
PROXY_BIN=${PROXY_BIN:-target/release/asap-proxy}
MOCK_BIN=target/release/fake-backend

# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_work asap-load
bench_bodies

TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

stop_pid() {
    local pid=$1 keep=() p
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [[ "$p" != "$pid" ]] && keep+=("$p"); done
    PIDS=("${keep[@]}")
}

MOCK_PID=
start_mock() { # delay_ms [--numbered]
    [[ -n "$MOCK_PID" ]] && stop_pid "$MOCK_PID"
    taskset -c "$CLIENT_CPU" "$MOCK_BIN" --port "$MOCK_PORT" constant --delay-ms "$1" "${@:2}" \
        >/dev/null 2>"$WORK/mock.log" &
    MOCK_PID=$!
    PIDS+=("$MOCK_PID")
    wait_http "http://127.0.0.1:$MOCK_PORT/health"
}

# The previous process's trace files are emptied and set aside, not deleted, until the run
# ends. On an ext4 without a journal (this benchmark's VMs) the inode allocator passes over
# every inode freed in the last 60 to 360 s (`recently_deleted` in fs/ext4/ialloc.c), so a
# proxy that opens thousands of sessions just after the last row's thousands of files were
# deleted pays a scan past them for each new file, in its own CPU time: 12-20 % of a
# 100-turn opening's CPU in perf, where a quiet file system costs 1.3 % (seventeenth
# session). Emptying frees the files' blocks and keeps their inodes. The work directory is
# still deleted when the run ends, so leave six minutes before the next run (or run with
# KEEP_WORK=1 and empty its files the same way).
RETIRED=0
retire_logs() {
    [[ -d "$WORK/logs" ]] || return 0
    find "$WORK/logs" -type f -exec truncate -s 0 {} +
    RETIRED=$((RETIRED + 1))
    mv "$WORK/logs" "$WORK/retired-logs.$RETIRED"
}

PROXY_PID=
start_proxy() { # [extra serve flags...]
    [[ -n "$PROXY_PID" ]] && stop_pid "$PROXY_PID"
    retire_logs
    # --max-steps: the 100- and 1,000-turn bodies are past the default cap of 100 actions,
    # which would answer with the finish action instead of the model's.
    # shellcheck disable=SC2086 # PROXY_ENV is a list of NAME=value words
    env RUST_LOG="${RUST_LOG:-info}" ${PROXY_ENV:-} taskset -c "$PROXY_CPU" "$PROXY_BIN" serve \
        --listen "127.0.0.1:$PROXY_PORT" --backend "http://127.0.0.1:$MOCK_PORT/v1" \
        --backend-model mock --log-dir "$WORK/logs" --max-steps 100000 \
        --prefixes "$WORK/no-prefixes" "$@" 2>"$WORK/proxy.log" &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    wait_http "http://127.0.0.1:$PROXY_PORT/health"
}

# The `relay` path's process in the proxy's place (examples/bench_relay.rs: the proxy's HTTP
# parts, no work), on the same port and CPU.
start_relay() {
    [[ -n "$PROXY_PID" ]] && stop_pid "$PROXY_PID"
    retire_logs
    mkdir -p "$WORK/logs"
    taskset -c "$PROXY_CPU" target/release/examples/bench_relay \
        --listen "127.0.0.1:$PROXY_PORT" --backend "http://127.0.0.1:$MOCK_PORT" \
        2>"$WORK/proxy.log" &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    wait_http "http://127.0.0.1:$PROXY_PORT/health"
}

# oha with a JSON report: oha_json OUT URL C N BODY_FLAG BODY_FILE
oha_json() {
    local out=$1 url=$2 c=$3 n=$4 flag=$5 file=$6
    taskset -c "$CLIENT_CPU" "$OHA" --no-tui --output-format json -m POST \
        -H 'content-type: application/json' -c "$c" -n "$n" "$flag" "$file" "$url" >"$out"
}

# The next turns of running sessions, in order (examples/bench_turns.rs): a load tool that
# picks bodies at random or repeats one would send what the proxy's caches answer whole.
# turns_json OUT URL C TURNS STREAM(yes|no) [--warm-only|--skip-warm] [bench_turns flags]: at
# c=1 16 rollouts of 16 turns each (256 requests), at c>1 4 rollouts a worker of 8 turns each
# (32 a worker), from TURNS turns on.
turns_json() {
    local out=$1 url=$2 c=$3 turns=$4 stream=$5 sessions=16 rounds=16 extra=()
    [[ $c -gt 1 ]] && sessions=$((c * 4)) && rounds=8
    [[ $stream == yes ]] && extra+=(--stream)
    taskset -c "$CLIENT_CPU" target/release/examples/bench_turns --url "$url" --turns "$turns" \
        --sessions "$sessions" --rounds "$rounds" --concurrency "$c" "${extra[@]}" "${@:6}" >"$out"
}

# Openings no process has seen (bench_turns --openings): each request is a template of FILE
# (256 rollouts) with a tag of its own in every message, so the proxy's caches answer none of
# it; a load tool cycling through FILE would resend each body after 256 requests (until the
# twenty-third session these rows did, and the caches answered part of each request).
# openings_json OUT URL C N FILE [--warm-only|--skip-warm]: the warm-up is 512 requests.
openings_json() {
    local out=$1 url=$2 c=$3 n=$4 file=$5
    taskset -c "$CLIENT_CPU" target/release/examples/bench_turns --url "$url" --openings "$file" \
        --requests "$n" --warm-requests 512 --concurrency "$c" "${@:6}" >"$out"
}

# The fields of an oha JSON report (or bench_turns'): p50_ms p99_ms rps ok_count total
oha_fields() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
if "p50_ms" in r:  # bench_turns
    print(f'{r["p50_ms"]:.3f} {r["p99_ms"]:.3f} {r["rps"]:.1f} {r["ok"]} {r["total"]}')
    sys.exit()
p = r["latencyPercentiles"]
s = r["summary"]
codes = r.get("statusCodeDistribution", {})
ok = sum(v for k, v in codes.items() if k.startswith("2"))
total = sum(codes.values()) + sum(r.get("errorDistribution", {}).values())
print(f'{p["p50"] * 1e3:.3f} {p["p99"] * 1e3:.3f} {s["requestsPerSec"]:.1f} {ok} {total}')
EOF
}

REPORT="$WORK/report.md"
ROWS="$WORK/rows.tsv"
: >"$ROWS"

if [[ $QUICK == 1 ]]; then N1=200; N32=640; else N1=3000; N32=6400; fi

# One configuration: direct and proxy, same concurrency, same mock.
# measure TURNS STREAM C N [PATH]
# PATH (default `ids`, the next turn of a running session): `foreign` (tool-call ids that are
# not the proxy's), `parts` (the same with each tool result a list of one text part, as
# SWE-agent and OpenHands send them), `mini` (mini-swe-agent's text mode, no ids) or
# `terminus` (Terminus-2's JSON keystrokes, no ids): every request opens a session never seen
# before (bench_turns --openings: 256 rollouts' bodies, each request with a tag of its own in
# every message), at any concurrency. `mini-run` and `terminus-run`: the next turns of running
# sessions of those dialects, sent in order by bench_turns with the proxy's own last reply
# in each history (the mock must number its answers: `start_mock DELAY --numbered`).
# `relay`: the direct baseline's body sent through examples/bench_relay.rs in the proxy's
# place (the transport floor: one more hop through the proxy's HTTP parts, no work). The
# direct baseline is the SWE-agent body's completions request of the same length.
measure() {
    local turns=$1 stream=$2 c=$3 n=$4 route=${5:-ids} sfx="" proxy_body direct_body flag
    local dialect=(--dialect ids)
    # ROUTE is PATH[+zstd][+mcN][+rcN]: +zstd compresses traces, +mcN sets
    # --message-cache-mib N, +rcN --render-cache-mib N.
    local path=${route%%+*} serve_flags=() part
    for part in $(tr '+' ' ' <<<"${route#"$path"}"); do
        case $part in
            zstd) serve_flags+=(--trace-compression zstd) ;;
            mc*) serve_flags+=(--message-cache-mib "${part#mc}") ;;
            rc*) serve_flags+=(--render-cache-mib "${part#rc}") ;;
        esac
    done
    [[ $stream == yes ]] && sfx="-stream"
    direct_body="$B/completions-$turns$sfx.json"
    local url="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
    if [[ $path == relay ]]; then
        proxy_body=$direct_body
        flag=-D
        url="http://127.0.0.1:$PROXY_PORT/v1/completions"
    elif [[ $path == ids || $path == *-run ]]; then
        # The next turns of running sessions, in order (bench_turns).
        [[ $path == *-run ]] && dialect=(--dialect "${path%-run}" --state "$WORK/replies.json")
        proxy_body=
        flag=turns
    else
        proxy_body="$B/$path-$turns$sfx.jsonl"
        flag=openings
    fi
    # Direct: warm-up, then the measured run.
    oha_json "$WORK/warm.json" "http://127.0.0.1:$MOCK_PORT/v1/completions" "$c" $((c * 4)) -D "$direct_body"
    oha_json "$WORK/direct.json" "http://127.0.0.1:$MOCK_PORT/v1/completions" "$c" "$n" -D "$direct_body"
    read -r d50 d99 drps dok dtotal < <(oha_fields "$WORK/direct.json")
    # Proxy: fresh process (clean CPU and RSS counters), warm-up of every session, then the run.
    if [[ $path == relay ]]; then
        start_relay
    else
        start_proxy "${serve_flags[@]}"
    fi
    if [[ $flag == turns ]]; then
        turns_json "$WORK/warm.json" "$url" "$c" "$turns" "$stream" --warm-only "${dialect[@]}"
    elif [[ $flag == openings ]]; then
        openings_json "$WORK/warm.json" "$url" "$c" "$n" "$proxy_body" --warm-only
    else
        oha_json "$WORK/warm.json" "$url" "$c" 512 "$flag" "$proxy_body"
    fi
    local cpu0 cpu1 bytes0 bytes1
    cpu0=$(cpu_ticks "$PROXY_PID")
    bytes0=$(du -sb "$WORK/logs" | cut -f1)
    if [[ $flag == turns ]]; then
        turns_json "$WORK/proxy.json" "$url" "$c" "$turns" "$stream" --skip-warm "${dialect[@]}"
    elif [[ $flag == openings ]]; then
        openings_json "$WORK/proxy.json" "$url" "$c" "$n" "$proxy_body" --skip-warm
    else
        oha_json "$WORK/proxy.json" "$url" "$c" "$n" "$flag" "$proxy_body"
    fi
    cpu1=$(cpu_ticks "$PROXY_PID")
    bytes1=$(du -sb "$WORK/logs" | cut -f1)
    read -r p50 p99 prps pok ptotal < <(oha_fields "$WORK/proxy.json")
    local cpu_ms hwm
    cpu_ms=$(python3 -c "print(f'{($cpu1 - $cpu0) * 1000 / $TICK / $ptotal:.3f}')")
    hwm=$(hwm_kib "$PROXY_PID")
    local trace_kib
    trace_kib=$(python3 -c "print(f'{($bytes1 - $bytes0) / 1024 / $ptotal:.1f}')")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$turns" "$stream" "$c" "$d50" "$d99" "$drps" "$p50" "$p99" "$prps" "$cpu_ms" \
        "$((hwm / 1024))" "$dok/$dtotal" "$pok/$ptotal" "$route" "$trace_kib" \
        "$flag" >>"$ROWS"
    echo "   $route: $turns turns, stream=$stream, c=$c: direct p50 ${d50} ms, proxy p50 ${p50} ms," \
        "direct ${drps} rps, proxy ${prps} rps, cpu ${cpu_ms} ms/req, hwm $((hwm / 1024)) MiB," \
        "trace ${trace_kib} KiB/req" \
        "(ok $dok/$dtotal, $pok/$ptotal)" >&2
}

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# Two peaks, each from a fresh process: 256 requests at once that each open a session (a
# restart under load: every record stores its history whole), and 1,024 requests of 256
# running sessions (the `ids` path: four next turns of each, 256 in flight), the sessions
# opened first one at a time on a zero-delay mock (so the opening does not set the peak; the
# process's RSS after it is the "warm RSS"). Every rollout has its own contents.
rss_step() {
    echo "== RSS: 256 concurrent 100-turn requests (mock delay 2000 ms)" >&2
    # shellcheck disable=SC2086 # RSS_FLAGS is a list of words
    start_mock 2000
    start_proxy ${RSS_FLAGS:-}
    idle_rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$PROXY_PID/status")
    # 256 openings at once, each of its own (until the twenty-third session oha -Z picked 256
    # of the 256 bodies at random: about 160 distinct, the repeats answered by the caches).
    openings_json "$WORK/proxy.json" "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" 256 256 \
        "$B/chat-100.jsonl" --skip-warm
    read -r o_p50 _ _ o_ok o_total < <(oha_fields "$WORK/proxy.json")
    o_hwm=$(( $(hwm_kib "$PROXY_PID") / 1024 ))
    start_mock 0
    # shellcheck disable=SC2086
    start_proxy ${RSS_FLAGS:-}
    # The running sessions' next turns, in order (bench_turns): the warm-up sends each
    # rollout's turn 100 one at a time, then 4 rounds send turns 101-104 of all 256 at once.
    # (Until the twenty-second session this step sent each warm-up body again, a retry of the
    # same turn, which the render cache answered whole.)
    local turns=(taskset -c "$CLIENT_CPU" target/release/examples/bench_turns
        --url "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" --turns 100 --sessions 256)
    "${turns[@]}" --rounds 4 --concurrency 1 --warm-only
    warm_rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$PROXY_PID/status")
    start_mock 2000
    "${turns[@]}" --rounds 4 --concurrency 256 --skip-warm >"$WORK/proxy.json"
    read -r r_p50 _ r_rps r_ok r_total < <(oha_fields "$WORK/proxy.json")
    r_hwm=$(( $(hwm_kib "$PROXY_PID") / 1024 ))
    echo "   idle RSS $idle_rss MiB; 256 sessions opening: peak RSS $o_hwm MiB, p50 $o_p50 ms ($o_ok/$o_total ok);" \
        "256 running sessions: warm RSS $warm_rss MiB, peak RSS $r_hwm MiB, p50 $r_p50 ms ($r_ok/$r_total ok)" >&2
}
if [[ $RSS_ONLY == 1 ]]; then
    rss_step
    exit 0
fi
if [[ ${#ROWS_ONLY[@]} -gt 0 ]]; then
    read -r turns stream c <<<"${ROWS_ONLY[*]:0:3}"
    for route in "${ROWS_ONLY[@]:3}"; do
        numbered=()
        [[ $route == *-run* ]] && numbered=(--numbered)
        start_mock $((c > 1 ? 20 : 0)) "${numbered[@]}"
        measure "$turns" "$stream" "$c" $((c > 1 ? N32 : N1)) "$route"
    done
    exit 0
fi

echo "== c=1, mock delay 0 ms" >&2
start_mock 0
for turns in 2 20 100; do
    for stream in no yes; do
        measure "$turns" "$stream" 1 "$N1"
        measure "$turns" "$stream" 1 "$N1" relay
    done
done

echo "== c=32, mock delay 20 ms" >&2
start_mock 20
for turns in 2 20 100; do
    for stream in no yes; do
        measure "$turns" "$stream" 32 "$N32"
        measure "$turns" "$stream" 32 "$N32" relay
    done
done

echo "== paths that open a session on every request (foreign ids, mini text, Terminus-2)" >&2
for route in foreign mini terminus; do
    # c=1 on a 0 ms mock, then c=32 on a 20 ms mock.
    for setting in "0 1 $N1" "20 32 $N32"; do
        read -r delay c n <<<"$setting"
        start_mock "$delay"
        for turns in 20 100; do
            for stream in no yes; do
                measure "$turns" "$stream" "$c" "$n" "$route"
            done
        done
    done
done

echo "== next turns of running sessions without ids (mini-swe-agent text, Terminus-2)" >&2
for route in mini-run terminus-run; do
    # c=1 on a 0 ms mock (streamed and not), then c=32 on a 20 ms mock.
    for setting in "0 1 $N1 no yes" "20 32 $N32 no"; do
        read -r delay c n streams <<<"$setting"
        start_mock "$delay" --numbered
        for turns in 20 100; do
            for stream in $streams; do
                measure "$turns" "$stream" "$c" "$n" "$route"
            done
        done
    done
done

echo "== tool results as lists of text parts (SWE-agent, OpenHands), c=1, mock delay 0 ms" >&2
start_mock 0
for turns in 20 100; do
    measure "$turns" no 1 "$N1" parts
done

echo "== compressed traces (--trace-compression zstd)" >&2
start_mock 0
for route in ids+zstd foreign+zstd mini+zstd terminus+zstd; do
    for turns in 20 100; do
        measure "$turns" no 1 "$N1" "$route"
    done
done

# The `ids` c=32 rows send 128 rollouts (at 100 turns ~41 MB of history, within the default
# message cache since the sixteenth session); the same row with a larger cache, to compare;
# and with a larger render cache: their prompts (37 MB) fit in the default 64 MiB, their
# prompts and escaped frames (78 MB) do not (twenty-second session).
echo "== c=32, 100 turns, --message-cache-mib 128, --render-cache-mib 128" >&2
start_mock 20
measure 100 no 32 "$N32" ids+mc128
measure 100 no 32 "$N32" ids+rc128

echo "== 1,000 turns, c=1, mock delay 0 ms" >&2
start_mock 0
oha_json "$WORK/warm.json" "http://127.0.0.1:$MOCK_PORT/v1/completions" 1 5 -D "$B/completions-1000.json"
oha_json "$WORK/direct.json" "http://127.0.0.1:$MOCK_PORT/v1/completions" 1 $((QUICK ? 20 : 100)) -D "$B/completions-1000.json"
read -r k_d50 k_d99 _ _ _ < <(oha_fields "$WORK/direct.json")
start_proxy
# Next turns in order: 16 rollouts, turns 1,000 to 1,015.
turns_json "$WORK/warm.json" "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" 1 1000 no --warm-only
cpu0=$(cpu_ticks "$PROXY_PID")
turns_json "$WORK/proxy.json" "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" 1 1000 no --skip-warm
cpu1=$(cpu_ticks "$PROXY_PID")
read -r k_p50 k_p99 _ k_ok k_total < <(oha_fields "$WORK/proxy.json")
k_cpu=$(python3 -c "print(f'{($cpu1 - $cpu0) * 1000 / $TICK / $k_total:.2f}')")
k_hwm=$(( $(hwm_kib "$PROXY_PID") / 1024 ))
echo "   direct p50 $k_d50 ms, proxy p50 $k_p50 ms, cpu $k_cpu ms/req ($k_ok/$k_total ok)" >&2

# One session growing turn by turn (101 requests in order, each history one turn longer):
# the trace's bytes per turn against the new content of that turn (the request's bytes beyond
# the previous request's). Prints one summary line.
growth_step() { # [serve flags...]
    start_proxy "$@"
    python3 - "$B/growth-100.jsonl" "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" "$WORK/logs" "${*:-plain}" <<'EOF'
import os, statistics, sys, urllib.request
bodies = open(sys.argv[1], "rb").read().splitlines()
url, logs, form = sys.argv[2], sys.argv[3], sys.argv[4]
def size():
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(logs) for f in fs)
rows, prev_body, prev_size = [], 0, 0
for body in bodies:
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    urllib.request.urlopen(req).read()
    now = size()
    rows.append((len(body) - prev_body, now - prev_size))
    prev_body, prev_size = len(body), now
(first_new, first_trace), turns = rows[0], rows[1:]
new = sum(n for n, _ in turns)
trace = sum(t for _, t in turns)
ratios = [t / n for n, t in turns]
print(f"Growing 100-turn session ({form}): first request {first_new / 1024:.1f} KiB of body, "
      f"{first_trace / 1024:.1f} KiB of trace; turns 1-100: new content {new / len(turns) / 1024:.2f} KiB/turn, "
      f"trace {trace / len(turns) / 1024:.2f} KiB/turn, trace/new content {trace / new:.2f} overall, "
      f"median {statistics.median(ratios):.2f}, max {max(ratios):.2f}.")
EOF
}
echo "== growing session: trace bytes per turn" >&2
start_mock 0
growth_step >"$WORK/growth-plain.txt"
growth_step --trace-compression zstd >"$WORK/growth-zstd.txt"
GROWTH_PLAIN=$(cat "$WORK/growth-plain.txt")
GROWTH_ZSTD=$(cat "$WORK/growth-zstd.txt")
echo "   $GROWTH_PLAIN" >&2
echo "   $GROWTH_ZSTD" >&2

rss_step
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report -------------------------------------------------------------------------------
{
    echo "# Load benchmark, $START"
    echo
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; $(uname -sr)."
    echo "Proxy on CPU $PROXY_CPU; mock backend and oha ($("$OHA" --version)) on CPU $CLIENT_CPU."
    echo "Load average before/after: $LOAD_BEFORE / $LOAD_AFTER. Quick mode: $QUICK."
    echo "Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$( [[ -n "$(git status --porcelain 2>/dev/null)" ]] && echo ' (working tree modified)'); proxy environment: ${PROXY_ENV:-none}; proxy binary: $PROXY_BIN ($("$PROXY_BIN" --version 2>/dev/null || echo "version unknown"))."
    echo
    echo "Latency in ms (oha or bench_turns, request sent to response body read). Added = proxy - direct."
    echo "CPU = proxy utime+stime per request. RSS = proxy VmHWM after the run."
    echo
    echo "Path: \`ids\` the next turns of running sessions (proxy-minted ids), sent in order by"
    echo "examples/bench_turns.rs: 16 rollouts at c=1, c × 4 at c=32, each sends turns TURNS, TURNS+1, …"
    echo "(16 at c=1, 8 at c=32; the body column is the first's size) after a warm-up at TURNS-1; \`foreign\` the same"
    echo "conversation with ids that are not the proxy's, \`mini\` mini-swe-agent's text mode (no"
    echo "ids) and \`terminus\` Terminus-2's JSON keystrokes (no ids): every such request opens a"
    echo "session no process has seen (bench_turns --openings: 256 rollouts' bodies, a tag of the request's own in every message). \`parts\`: the \`foreign\` bodies with each tool result a list of one text part"
    echo "(SWE-agent's and OpenHands' shape). \`mini-run\` and \`terminus-run\`: the next turns of running sessions of those two"
    echo "dialects, sent in order as \`ids\` is, each history holding the proxy's own last reply (the"
    echo "proxy finds the session by it; the mock numbers its answers so that no two are equal)."
    echo "\`relay\`: the direct body through examples/bench_relay.rs in the proxy's place (the proxy's"
    echo "HTTP parts, no work): the transport floor under every proxy row (its proxy columns are the relay's)."
    echo "\`+zstd\`: with \`--trace-compression zstd\`; \`+mc128\`: \`--message-cache-mib 128\`; \`+rc128\`: \`--render-cache-mib 128\`."
    echo "Trace = bytes written to the log directory per request."
    echo
    echo "| path | turns | body | stream | c | direct p50 | direct p99 | proxy p50 | proxy p99 | added p50 | added p99 | direct rps | proxy rps | proxy/direct | CPU ms/req | peak RSS MiB | trace KiB/req | ok (direct, proxy) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    while IFS=$'\t' read -r turns stream c d50 d99 drps p50 p99 prps cpu hwm dok pok route trace flag; do
        python3 - "$turns" "$stream" "$c" "$d50" "$d99" "$drps" "$p50" "$p99" "$prps" "$cpu" "$hwm" "$dok" "$pok" "$B/chat-$turns.json" "$route" "$trace" <<'EOF'
import os, sys
t, s, c, d50, d99, drps, p50, p99, prps, cpu, hwm, dok, pok, body, route, trace = sys.argv[1:]
kib = os.path.getsize(body) / 1024
f = float
print(f"| {route} | {t} | {kib:.0f} KiB | {s} | {c} | {f(d50):.3f} | {f(d99):.3f} | {f(p50):.3f} | {f(p99):.3f} | "
      f"{f(p50) - f(d50):.3f} | {f(p99) - f(d99):.3f} | {f(drps):.0f} | {f(prps):.0f} | "
      f"{100 * f(prps) / f(drps):.1f} % | {f(cpu):.3f} | {hwm} | {trace} | {dok}, {pok} |")
EOF
    done <"$ROWS"
    echo
    echo "1,000 turns ($(( $(stat -c %s "$B/chat-1000.json") / 1024 )) KiB body), c=1: direct p50 $k_d50 ms, proxy p50 $k_p50 ms (p99 $k_p99), added p50 $(python3 -c "print(f'{$k_p50 - $k_d50:.2f}')") ms, proxy CPU $k_cpu ms/request, peak RSS $k_hwm MiB ($k_ok/$k_total ok)."
    echo
    echo "256 concurrent 100-turn requests (mock delay 2 s), fresh process: idle RSS $idle_rss MiB; 256 requests at once, each opening its session: peak RSS $o_hwm MiB, p50 $o_p50 ms ($o_ok/$o_total ok); another fresh process, its 256 sessions opened one at a time (warm RSS $warm_rss MiB), then 1,024 requests of those running sessions (four next turns of each, 256 at a time): peak RSS $r_hwm MiB, p50 $r_p50 ms, $r_rps rps ($r_ok/$r_total ok)."
    echo
    echo "$GROWTH_PLAIN"
    echo
    echo "$GROWTH_ZSTD"
} >"$REPORT"

mkdir -p "$RESULTS"
OUT="$RESULTS/$(date -u +%Y-%m-%d).md"
[[ $QUICK == 1 ]] && OUT="$RESULTS/$(date -u +%Y-%m-%d)-quick.md"
cp "$REPORT" "$OUT"
cat "$REPORT"
echo "== written to $OUT" >&2

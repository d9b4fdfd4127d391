#!/usr/bin/env bash
# Soak run of the proxy (issue 9 item 8; docs/reliability.md section 8).
#
# Builds release binaries, starts the fault-injecting soak backend (`fake-backend soak`)
# and the proxy on loopback, runs the soak driver (examples/soak.rs: CONCURRENCY scaffold
# loops for MINUTES minutes, mixing eight scaffold profiles, streaming and not, with nudges
# and backend faults), stops the proxy with SIGTERM, then checks:
#   - the driver's own checks: no failed request but the injected faults' (429/502/504, each
#     explained by a fault the backend logged for that prompt), every answered request has its
#     step record and every failed one its error record, per session; profiles; flat RSS;
#   - the proxy exits 0 on SIGTERM after the run and logged no panic;
#   - `asap-proxy replay --check` on the trace directory exits 0 (every prompt rebuilt and
#     re-rendered to the recorded hash, every action re-parsed the same);
#   - `asap-proxy report` reads the directory (exit 0).
# Prints PASS/FAIL lines and writes the summary to bench/results/soak-<date>.md
# (soak-<date>-<M>min.md for another length). Exit status 1 on any FAIL.
#
# Usage: bench/soak.sh [MINUTES]        (default 10; run it under `nice -n 10` on a shared box)
# Env:   CONCURRENCY=64 FAULT_RATE=0.05 BACKEND_PORT=0 PROXY_PORT=0 (0: any free port)
#        RESULTS=bench/results KEEP_LOGS=1 (keep the trace directory; its path is printed)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MINUTES=${1:-10}
CONCURRENCY=${CONCURRENCY:-64}
FAULT_RATE=${FAULT_RATE:-0.05}
BACKEND_PORT=${BACKEND_PORT:-0}
PROXY_PORT=${PROXY_PORT:-0}
RESULTS=${RESULTS:-bench/results}
KEEP_LOGS=${KEEP_LOGS:-0}
# The proxy gives up on a backend call after BACKEND_TIMEOUT s (a `stall` fault sleeps 2 s
# longer); retries: 3 (4 calls), so a burst of 4 or more faults reaches the client.
BACKEND_TIMEOUT=5
STALL_MS=$(( (BACKEND_TIMEOUT + 2) * 1000 ))

for tool in curl; do
    command -v "$tool" >/dev/null || { echo "bench/soak.sh: needs $tool" >&2; exit 1; }
done

echo "== cargo build --release (proxy, soak backend, soak driver)" >&2
cargo build --release --locked --bin asap-proxy --bin fake-backend --example soak >&2
PROXY_BIN=target/release/asap-proxy
BACKEND_BIN=target/release/fake-backend
DRIVER_BIN=target/release/examples/soak

# shellcheck source=bench/lib.sh
. bench/lib.sh
KEEP_WORK=$KEEP_LOGS
bench_work asap-soak
LOGS="$WORK/logs"

# The address a server printed ("... listening on http://ADDR/v1"), once it is up.
wait_addr() { # LOG PID NAME
    local log=$1 pid=$2 name=$3 i addr
    for i in $(seq 1 400); do
        kill -0 "$pid" 2>/dev/null || { echo "bench/soak.sh: $name exited: $(cat "$log")" >&2; exit 1; }
        addr=$(grep -oE 'listening on http://[0-9.]+:[0-9]+' "$log" | head -n 1 | sed 's#.*http://##')
        if [[ -n $addr ]] && curl -sf -o /dev/null "http://$addr/health"; then
            echo "$addr"
            return 0
        fi
        sleep 0.05
    done
    echo "bench/soak.sh: $name did not come up" >&2
    exit 1
}

forget_pid() {
    local keep=() p
    for p in "${PIDS[@]}"; do [[ "$p" != "$1" ]] && keep+=("$p"); done
    PIDS=("${keep[@]}")
}

"$BACKEND_BIN" --port "$BACKEND_PORT" soak --fault-rate "$FAULT_RATE" --stall-ms "$STALL_MS" \
    >/dev/null 2>"$WORK/backend.log" &
BACKEND_PID=$!
PIDS+=("$BACKEND_PID")
BACKEND_ADDR=$(wait_addr "$WORK/backend.log" "$BACKEND_PID" "soak backend")

RUST_LOG=${RUST_LOG:-warn} NO_COLOR=1 "$PROXY_BIN" serve --listen "127.0.0.1:$PROXY_PORT" \
    --backend "http://$BACKEND_ADDR/v1" --log-dir "$LOGS" \
    --backend-timeout "$BACKEND_TIMEOUT" --backend-retries 3 2>"$WORK/proxy.log" &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
PROXY_ADDR=$(wait_addr "$WORK/proxy.log" "$PROXY_PID" "proxy")

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DRIVER_CMD=("$DRIVER_BIN" --proxy "http://$PROXY_ADDR/v1" --minutes "$MINUTES"
    --concurrency "$CONCURRENCY" --log-dir "$LOGS" --proxy-pid "$PROXY_PID"
    --backend "http://$BACKEND_ADDR" --summary-md "$WORK/summary.md"
    --summary-json "$WORK/summary.json")
echo "== soak: $MINUTES min, concurrency $CONCURRENCY, fault rate $FAULT_RATE ($WORK)" >&2
set +e
"${DRIVER_CMD[@]}" >"$WORK/driver.out" 2>"$WORK/driver.err"
DRIVER_RC=$?
set -e
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
grep -E '^soak: t=' "$WORK/driver.err" | tail -n 3 >&2 || true

CHECKS=()
# The driver's checks (statuses, faults, traces, profiles, rss).
while IFS= read -r line; do
    CHECKS+=("$line")
done < <(grep -E '^(PASS|FAIL) ' "$WORK/driver.err")
if [[ $DRIVER_RC -ne 0 && $DRIVER_RC -ne 1 ]]; then
    CHECKS+=("FAIL driver: exited with status $DRIVER_RC (see $WORK/driver.err)")
fi

# Graceful stop after the run.
kill -TERM "$PROXY_PID"
set +e
wait "$PROXY_PID"
PROXY_RC=$?
set -e
forget_pid "$PROXY_PID"
if [[ $PROXY_RC -eq 0 ]]; then
    CHECKS+=("PASS shutdown: the proxy exited 0 on SIGTERM after the run")
else
    CHECKS+=("FAIL shutdown: the proxy exited with status $PROXY_RC on SIGTERM")
fi
if grep -q "panicked" "$WORK/proxy.log"; then
    CHECKS+=("FAIL proxy log: a panic was logged ($(grep -m1 panicked "$WORK/proxy.log"))")
else
    CHECKS+=("PASS proxy log: no panic ($(grep -c 'ERROR' "$WORK/proxy.log" || true) ERROR lines)")
fi

set +e
"$PROXY_BIN" replay --check "$LOGS" >"$WORK/replay.out" 2>"$WORK/replay.err"
REPLAY_RC=$?
"$PROXY_BIN" report "$LOGS" >"$WORK/report.md" 2>"$WORK/report.err"
REPORT_RC=$?
set -e
REPLAY_LAST=$(tail -n 1 "$WORK/replay.out" 2>/dev/null)
if [[ $REPLAY_RC -eq 0 ]]; then
    CHECKS+=("PASS replay --check: exit 0 ($REPLAY_LAST)")
else
    CHECKS+=("FAIL replay --check: exit $REPLAY_RC ($REPLAY_LAST; $(head -c 300 "$WORK/replay.err"))")
fi
if [[ $REPORT_RC -eq 0 ]]; then
    CHECKS+=("PASS report: exit 0, $(wc -l <"$WORK/report.md") lines")
else
    CHECKS+=("FAIL report: exit $REPORT_RC ($(head -c 300 "$WORK/report.err"))")
fi

VERDICT=PASS
for line in "${CHECKS[@]}"; do
    [[ $line == FAIL* ]] && VERDICT=FAIL
done

mkdir -p "$RESULTS"
DATE=$(date -u +%Y-%m-%d)
if [[ $MINUTES == 10 ]]; then OUT="$RESULTS/soak-$DATE.md"; else OUT="$RESULTS/soak-$DATE-${MINUTES}min.md"; fi
{
    echo "# Soak run, $START: $VERDICT"
    echo
    echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; $(uname -sr)."
    echo "Load average before/after: $LOAD_BEFORE / $LOAD_AFTER (niceness $(nice))."
    echo "Proxy: \`asap-proxy serve --backend-timeout $BACKEND_TIMEOUT --backend-retries 3\` (other settings default);"
    echo "backend: \`fake-backend soak --fault-rate $FAULT_RATE --stall-ms $STALL_MS\`;"
    echo "driver: \`soak --minutes $MINUTES --concurrency $CONCURRENCY\`."
    echo "Command: \`bench/soak.sh $MINUTES\` (CONCURRENCY=$CONCURRENCY FAULT_RATE=$FAULT_RATE)."
    echo
    sed -e '/^Checks:$/,$d' "$WORK/summary.md" 2>/dev/null || echo "(no driver summary: see the driver's error output)"
    echo "Checks:"
    echo
    for line in "${CHECKS[@]}"; do
        echo "- $line"
    done
} >"$OUT"
echo
for line in "${CHECKS[@]}"; do
    echo "$line"
done
echo "$VERDICT: soak of $MINUTES min (summary in $OUT)"
[[ $VERDICT == PASS ]]

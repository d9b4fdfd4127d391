# Shared by bench/load.sh and bench/instructions.sh (sourced): a work directory removed on
# exit together with every process started (add their pids to PIDS), the generated bodies,
# and waiting for a server to answer.

# bench_work NAME: WORK=/tmp/NAME.XXXXXX, PIDS=(), both cleaned up on exit or interrupt
# (WORK kept, and its path printed, when KEEP_WORK=1).
bench_work() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [[ ${KEEP_WORK:-0} == 1 ]]; then
        echo "== kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}

# bench_bodies: SWE-agent-shaped bodies of 2, 20, 100 and 1,000 turns on every path
# (examples/bench_bodies.rs) in B=$WORK/bodies, and an empty prefix directory
# ($WORK/no-prefixes: every body gets the swe-agent profile's built-in demonstration, as
# bench_bodies renders the direct baseline's prompt).
bench_bodies() {
    echo "== generating bodies in $WORK/bodies" >&2
    target/release/examples/bench_bodies --out "$WORK/bodies" --turns 2,20,100,1000 \
        --sessions 256 >&2
    B="$WORK/bodies"
    mkdir -p "$WORK/no-prefixes"
}

# wait_http URL [SECONDS]: until URL answers 2xx (default 10 s), else exits with a message.
wait_http() {
    local url=$1 tries=$((${2:-10} * 20)) i
    for i in $(seq 1 "$tries"); do
        curl -sf -o /dev/null "$url" && return 0
        sleep 0.05
    done
    echo "$(basename "$0"): $url did not come up" >&2
    exit 1
}

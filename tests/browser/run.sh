#!/usr/bin/env bash
# The trajectory viewer in a real browser (issue 10): starts `asap-proxy view` on the trace
# recorded by the proxy in tests/fixtures/view/, loads the session list, the session page and
# one prompt in headless Chromium (Debian's `chromium` package), checks from the DOM that the
# session and every step are shown (thought, action, parse failure, nudge, prompt) and that
# model-written markup stayed text, and saves screenshots: target/artifacts/viewer.png (the
# session page) and target/artifacts/viewer-list.png (the list). CI keeps target/artifacts/.
#
# Then `report --html` (issue 21): a sweep of 4 labels made from the same trace
# (tests/browser/sweep.py, one label named `<script>…`), its page loaded from the file: the
# tables, one SVG plot per metric of the JSON's estimates plus the Pass@k curves, the JSON's
# Pass@1 in %, the markup label as text, and a session link that opens the session in a
# viewer over the sweep; screenshot target/artifacts/report.png.
#
# Needs: chromium (`apt-get install chromium`; .ci/run installs it), python3. ASAP_PROXY_BIN: the
# binary to run [default: builds target/debug/asap-proxy]. ASAP_CHROMIUM: the browser
# [default: chromium on PATH].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

bin=${ASAP_PROXY_BIN:-}
if [[ -z $bin ]]; then
    cargo build --locked --bin asap-proxy
    bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/asap-proxy
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
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# start_view DIR LOG: runs `asap-proxy view DIR` on a free port; sets $base (http://host:port).
start_view() {
    "$bin" view "$1" --listen 127.0.0.1:0 2>"$2" &
    local pid=$!
    pids+=("$pid")
    local url=
    for _ in $(seq 200); do
        url=$(sed -n 's|^asap-proxy view: ||p' "$2")
        [[ -n $url ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z $url ]]; then
        echo "asap-proxy view did not start:" >&2
        cat "$2" >&2
        exit 1
    fi
    base=${url%/ui}
}
start_view "$fixture" "$tmp/view.log"

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

echo "== report --html: a sweep of 4 labels" >&2
python3 tests/browser/sweep.py "${files[0]}" "$tmp/sweep"
start_view "$tmp/sweep/logs" "$tmp/view-sweep.log"
report=(report "$tmp/sweep/logs" --results "$tmp/sweep/results.jsonl" --k 1,2
    --order stage1,stage2,stage3)
if ! "$bin" "${report[@]}" --format json --html "$tmp/report.html" --viewer-url "$base" \
    >"$tmp/report.json" 2>"$tmp/report.log"; then
    echo "FAIL: asap-proxy report --html:" >&2
    cat "$tmp/report.log" >&2
    exit 1
fi
grep -qF "wrote $tmp/report.html" "$tmp/report.log" || {
    echo "FAIL: report --html did not say it wrote the page" >&2
    failures=$((failures + 1))
}
# From the JSON the same run printed: the plots expected (one per metric of the estimates,
# plus the Pass@k curves), stage3's Pass@1 in %, and a session of stage2.
read -r plots pass1 session < <(python3 - "$tmp/report.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
metrics = {e["metric"] for l in doc["labels"] for e in l["estimates"]}
stage3 = next(l for l in doc["labels"] if l["label"] == "stage3")
session = next(t["session"] for t in doc["trajectories"] if t["label"] == "stage2")
print(len(metrics) + 1, "%.1f" % (stage3["pass_at_k"]["1"] * 100), session)
PY
)
browse --dump-dom "file://$tmp/report.html" >"$tmp/report-dom.html"
page=$tmp/report-dom.html
for id in protocol summary stability estimates changes plots network behaviour endings nudges \
    trajectory-list; do
    expect "$page" "id=\"$id\""
done
expect "$page" "<th>stage1</th>"
expect "$page" "<td class=\"num\">$pass1</td>"
expect "$page" "&lt;script&gt;alert(1)&lt;/script&gt;"
reject "$page" "<script"
expect "$page" "data-metric=\"pass@k\""
expect "$page" "data-metric=\"pass@1\""
expect "$page" "data-metric=\"autonomous_edit\""
svgs=$(grep -o "<svg" "$page" | wc -l)
if [[ $svgs -ne $plots ]]; then
    echo "FAIL: report.html has $svgs SVG plots, the JSON's estimates give $plots" >&2
    failures=$((failures + 1))
fi
expect "$page" "href=\"$base/ui/session/$session\""
browse --window-size=1400,2400 --screenshot="$artifacts/report.png" "file://$tmp/report.html" \
    >/dev/null
# The link opens the session in the viewer over the sweep.
browse --dump-dom "$base/ui/session/$session" >"$tmp/linked.html"
expect "$tmp/linked.html" "Trajectory:"
expect "$tmp/linked.html" "stage2"

for shot in viewer.png viewer-list.png report.png; do
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
echo "viewer and report --html OK in $("$chromium" --version 2>/dev/null | head -n 1); screenshots in $artifacts/" >&2

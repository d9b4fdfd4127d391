#!/usr/bin/env bash
# Prefix-cache stability (issue 8, part 5; see BENCHMARKS.md): drives 100-turn SWE-agent
# sessions through the proxy (both nudges, an unparsable turn, a demonstration or a task
# prefix, and one session that outgrows a context window) and counts how many consecutive
# prompts start with the previous prompt minus its trailing "## Thinking\n" cue. Exits 1 if a
# prompt fails to extend its predecessor anywhere but at a logged context elision.
#
# Usage: bench/prefix-cache.sh [--turns N] [--context-length TOKENS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RESULTS=${RESULTS:-bench/results}
cargo build --release --locked --example prefix_cache >&2
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
target/release/examples/prefix_cache "$@" | tee "$OUT"
mkdir -p "$RESULTS"
{
    echo "# Prefix-cache stability, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "Command: bench/prefix-cache.sh $*"
    echo
    cat "$OUT"
} >"$RESULTS/$(date -u +%Y-%m-%d)-prefix-cache.md"
echo "== written to $RESULTS/$(date -u +%Y-%m-%d)-prefix-cache.md" >&2

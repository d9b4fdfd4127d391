#!/usr/bin/env bash
# Runs the fuzz targets one after another, each for SECONDS (default 600), at low priority,
# then minimises the corpus it grew into fuzz/corpus/<target>/ (libFuzzer -set_cover_merge=1).
#
#   fuzz/run.sh [SECONDS] [TARGET...]        targets: decode render parse (default: all)
#
# Works on stable Rust: cargo-fuzz passes nightly-only flags (-Zsanitizer, ...), which
# RUSTC_BOOTSTRAP=1 lets a stable compiler accept. cargo-fuzz is taken from PATH or from
# ~/.cache/asap-proxy/cargo-fuzz (installed there on first use:
# `cargo install cargo-fuzz --locked --root ~/.cache/asap-proxy/cargo-fuzz`).
# Environment: FUZZ_SANITIZER (address | none; default address), FUZZ_TOOLCHAIN (e.g.
# `+nightly`; default: the default toolchain), FUZZ_ARGS (extra libFuzzer flags).
# A crash leaves its input in fuzz/artifacts/<target>/ and makes the script exit 1 after the
# remaining targets; reproduce it with `cargo fuzz run <target> <file>`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode render parse)
sanitizer="${FUZZ_SANITIZER:-address}"
toolchain="${FUZZ_TOOLCHAIN:-}"

fuzz_root="$HOME/.cache/asap-proxy/cargo-fuzz"
if ! command -v cargo-fuzz >/dev/null; then
    if [ ! -x "$fuzz_root/bin/cargo-fuzz" ]; then
        echo "installing cargo-fuzz into $fuzz_root" >&2
        nice -n 19 cargo install cargo-fuzz --locked --root "$fuzz_root"
    fi
    export PATH="$fuzz_root/bin:$PATH"
fi
export RUSTC_BOOTSTRAP=1

# Seed inputs from the test fixtures (added on every run, so new fixtures join the corpus).
seed() {
    local target="$1" dest="$2" f
    case "$target" in
        decode | render)
            cp "$root"/tests/fixtures/requests/*.json "$root"/tests/fixtures/render/*.json \
                "$here"/seeds/responses/*.json "$dest"/
            ;;
        parse)
            for f in "$root"/tests/fixtures/parse/*.txt; do
                # The completion is what follows the `---` line of the fixture's header.
                sed '1,/^---$/d' "$f" >"$dest/$(basename "$f")"
            done
            ;;
    esac
}

dict_for() {
    case "$1" in
        parse) echo "$here/dict/parse.dict" ;;
        *) echo "$here/dict/json.dict" ;;
    esac
}

cd "$root"
status=0
summary=()
for target in "${targets[@]}"; do
    work="$(mktemp -d)"
    mkdir -p "$work/corpus" "$work/min" "$here/corpus/$target"
    cp -r "$here/corpus/$target/." "$work/corpus/"
    seed "$target" "$work/corpus"
    echo "== $target: ${seconds}s, sanitizer $sanitizer (log: $work/log)" >&2
    rc=0
    # shellcheck disable=SC2086
    nice -n 19 cargo $toolchain fuzz run --fuzz-dir "$here" --sanitizer "$sanitizer" \
        --debug-assertions "$target" "$work/corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -dict="$(dict_for "$target")" -print_final_stats=1 ${FUZZ_ARGS:-} \
        >"$work/log" 2>&1 || rc=$?
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done |stat::(number_of_executed_units|peak_rss_mb)|==[0-9]+==|SUMMARY|thread .* panicked|.*Test unit written)' \
        "$work/log" >&2 || true
    if [ "$rc" -ne 0 ]; then
        status=1
        echo "== $target: FAILED (exit $rc); log kept at $work/log" >&2
        tail -40 "$work/log" >&2
    fi
    # Minimise: the smallest set of inputs that covers the same edges (hit counts ignored,
    # so the committed corpus stays at a few hundred files).
    nice -n 19 cargo $toolchain fuzz run --fuzz-dir "$here" --sanitizer "$sanitizer" \
        --debug-assertions "$target" "$work/min" "$work/corpus" -- \
        -set_cover_merge=1 -use_counters=0 >"$work/merge.log" 2>&1 || {
        status=1
        echo "== $target: merge failed, see $work/merge.log" >&2
        continue
    }
    find "$here/corpus/$target" -type f -delete
    cp -r "$work/min/." "$here/corpus/$target/"
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || echo '?')"
    edges="$(grep -o 'MERGE-OUTER: .*' "$work/merge.log" | tail -1)"
    summary+=("$target: exit $rc, $runs executions in ${seconds}s, corpus $(find "$here/corpus/$target" -type f | wc -l) files (${edges#MERGE-OUTER: })")
    [ "$rc" -ne 0 ] || rm -rf "$work"
done
printf '%s\n' "${summary[@]}" >&2
exit "$status"

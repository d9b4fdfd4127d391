#!/usr/bin/env bash
# venv.sh — the cached Python venv with the real scaffolds; prints its python's path on stdout.
#
#   scripts/venv.sh          the end-to-end venv: ${ASAP_CACHE:-$HOME/.cache/asap-proxy}/venv-e2e,
#                            Python 3.12 (openhands-sdk needs it), tests/e2e/requirements.txt,
#                            rebuilt when that file changes (same venv, stamp and lock as
#                            tests/e2e/run.sh).
#   scripts/venv.sh --mini   a venv that can run mini-swe-agent: the e2e venv when it is already
#                            built and current, else $ASAP_CACHE/venv-mini with only the
#                            mini-swe-agent pin of requirements.txt, on any Python >= 3.10
#                            (faster to build; used by scripts/quickstart.sh).
#
# Progress goes to stderr. Environment: ASAP_CACHE, ASAP_PYTHON312 (a python3.12 to use).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
reqs="$here/../tests/e2e/requirements.txt"
cache="${ASAP_CACHE:-$HOME/.cache/asap-proxy}"
mode="e2e"
case "${1:-}" in
    "") ;;
    --mini) mode="mini" ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "venv.sh: unknown argument $1" >&2; exit 2 ;;
esac

find_python() {  # find_python MIN_MINOR CANDIDATES...
    local minor="$1" c; shift
    for c in "$@"; do
        if [[ -n "$c" && -x "$c" ]] && "$c" -c "import sys, venv, ensurepip; assert sys.version_info >= (3, $minor)" 2>/dev/null; then
            echo "$c"; return 0
        fi
    done
    return 1
}
python312_candidates() {
    echo "${ASAP_PYTHON312:-}" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
         "$(command -v python3.12 || true)" /usr/bin/python3.12 /usr/local/bin/python3.12
}

# build VENV PYTHON REQUIREMENTS_FILE: (re)create VENV unless its stamp matches the requirements.
build() {
    local venv="$1" python="$2" req="$3" want have
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -x "$venv/bin/python" ]]; then return 0; fi
    [[ -n "$python" ]] || return 1
    echo "venv: creating $venv with $python (first run: a minute or more)" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
    echo "$want" > "$venv/.requirements.sha256"
}

mkdir -p "$cache"
e2e="$cache/venv-e2e"
want_e2e="$(sha256sum "$reqs" | cut -d' ' -f1)"
e2e_current() { [[ -x "$e2e/bin/python" && "$(cat "$e2e/.requirements.sha256" 2>/dev/null)" == "$want_e2e" ]]; }

if [[ "$mode" == "mini" ]] && e2e_current; then
    echo "$e2e/bin/python"; exit 0
fi

if [[ "$mode" == "e2e" ]]; then
    exec 9>"$cache/venv-e2e.lock"   # the lock tests/e2e/run.sh takes
    flock 9
    py=""
    e2e_current || py="$(find_python 12 $(python312_candidates))" \
        || { echo "venv.sh: Python 3.12 is required (openhands-sdk); set ASAP_PYTHON312" >&2; exit 1; }
    build "$e2e" "$py" "$reqs"
    echo "$e2e/bin/python"
    exit 0
fi

# --mini: only mini-swe-agent (pinned as in requirements.txt).
mini="$cache/venv-mini"
exec 9>"$cache/venv-mini.lock"
flock 9
req_mini="$(mktemp)"
trap 'rm -f "$req_mini"' EXIT
grep -E '^mini-swe-agent[=<>~!]' "$reqs" > "$req_mini" || { echo "venv.sh: no mini-swe-agent pin in $reqs" >&2; exit 1; }
py=""
if ! { [[ -x "$mini/bin/python" ]] && [[ "$(cat "$mini/.requirements.sha256" 2>/dev/null)" == "$(sha256sum "$req_mini" | cut -d' ' -f1)" ]]; }; then
    py="$(find_python 10 $(python312_candidates) "$(command -v python3 || true)" \
          "$(command -v python3.13 || true)" "$(command -v python3.11 || true)" "$(command -v python3.10 || true)")" \
        || { echo "venv.sh: Python >= 3.10 with venv is required" >&2; exit 1; }
fi
build "$mini" "$py" "$req_mini"
echo "$mini/bin/python"

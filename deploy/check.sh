#!/usr/bin/env bash
# Static checks of deploy/ (no Docker engine or cluster needed; scripts/test.sh runs this
# first): the Dockerfile linted by hadolint, the Compose files validated against the Compose
# specification's JSON schema, the Kubernetes manifests against the Kubernetes schemas
# (strict: unknown fields are errors), YAML syntax and duplicate keys, and the project rules
# of deploy/check_manifests.py (ConfigMap = deploy/config/asap-proxy.toml, its keys known to
# the proxy, probes on /health, resources, non-root, Prometheus annotations). When a proxy
# binary is at hand (ASAP_PROXY_BIN, else target/release or target/debug), the TOML file is
# also loaded by the proxy itself.
#
# Tools come from PyPI into ${ASAP_CACHE:-$HOME/.cache/asap-proxy}/venv-deploy, rebuilt when
# deploy/requirements.txt changes; each bundles its schemas, so nothing is fetched at check
# time. Exits non-zero on the first failing check.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cache="${ASAP_CACHE:-$HOME/.cache/asap-proxy}"
venv="$cache/venv-deploy"
python="${PYTHON:-python3}"
kube_version="${ASAP_KUBE_VERSION:-1.37.0}"

want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
have="$(cat "$venv/.requirements.sha256" 2>/dev/null || true)"
if [[ "$want" != "$have" || ! -x "$venv/bin/python" ]]; then
    echo "deploy/check.sh: creating $venv" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$venv/.requirements.sha256"
fi
bin="$venv/bin"
cd "$repo"

mapfile -t manifests < <(find deploy/k8s -name '*.yaml' | sort)
compose=(deploy/compose.yaml deploy/compose.llamacpp.yaml)

echo "deploy/check.sh: hadolint deploy/Dockerfile" >&2
"$bin/hadolint" --failure-threshold warning deploy/Dockerfile

echo "deploy/check.sh: yamllint" >&2
"$bin/yamllint" --strict -d '{extends: relaxed, rules: {line-length: {max: 120}}}' \
    "${compose[@]}" "${manifests[@]}"

echo "deploy/check.sh: compose files against the Compose specification" >&2
"$bin/check-jsonschema" --builtin-schema vendor.compose-spec "${compose[@]}"

echo "deploy/check.sh: Kubernetes manifests against the $kube_version schemas (strict)" >&2
"$bin/kubernetes-validate" --strict --quiet -k "$kube_version" "${manifests[@]}"

echo "deploy/check.sh: project rules" >&2
"$bin/python" deploy/check_manifests.py

proxy="${ASAP_PROXY_BIN:-}"
for candidate in target/release/asap-proxy target/debug/asap-proxy; do
    [[ -z "$proxy" && -x "$candidate" ]] && proxy="$candidate"
done
if [[ -n "$proxy" ]]; then
    echo "deploy/check.sh: $proxy loads deploy/config/asap-proxy.toml" >&2
    "$proxy" render --config deploy/config/asap-proxy.toml \
        --request tests/fixtures/requests/swe-agent-1.json >/dev/null
fi
echo "deploy/check.sh: all deploy checks passed" >&2

#!/usr/bin/env python3
"""Project rules for deploy/ that no schema checks (run by deploy/check.sh).

1. The ConfigMap carries deploy/config/asap-proxy.toml verbatim.
2. Every key of that TOML file is a settings field of src/config.rs (`ServeArgs` or
   `PromptArgs`, each declared once for flags and file; the proxy rejects unknown keys at
   start; this catches it without a built binary).
3. Every pod template (Deployment, Job) has an `asap-proxy` container (or native sidecar)
   with liveness and readiness probes on /health, CPU and memory requests and limits, a
   non-root security context, and Prometheus scrape annotations for /metrics on the
   proxy's port.

Prints one line per problem and exits 1 when there is any; PyYAML comes from the venv.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
TOML_FILE = DEPLOY / "config" / "asap-proxy.toml"
CONFIGMAP = DEPLOY / "k8s" / "configmap.yaml"
PROXY_PORT = 8100

problems: list[str] = []


def problem(where: str, what: str) -> None:
    problems.append(f"{where}: {what}")


def file_config_keys() -> set[str]:
    """The TOML keys of src/config.rs: fields of `ServeArgs` and `PromptArgs`, less those
    marked `#[serde(skip)]` (flags only) and flattened groups."""
    text = (REPO / "src" / "config.rs").read_text()
    keys: set[str] = set()
    for name in ("ServeArgs", "PromptArgs"):
        m = re.search(r"pub struct " + name + r" \{(.*?)\n    \}", text, re.S)
        if not m:
            problem("src/config.rs", f"no `pub struct {name}` found")
            return set()
        attrs: list[str] = []
        for line in m.group(1).splitlines():
            line = line.strip()
            if line.startswith("#["):
                attrs.append(line)
                continue
            field = re.match(r"pub (\w+):", line)
            if field:
                skipped = any("serde(skip)" in a or "flatten" in a for a in attrs)
                if not skipped:
                    keys.add(field.group(1))
                attrs = []
            elif not line.startswith("///"):
                attrs = [] if not line else attrs
    return keys


def check_config() -> None:
    text = TOML_FILE.read_text()
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problem(str(TOML_FILE.relative_to(REPO)), f"not TOML: {e}")
        return
    known = file_config_keys()
    for key in config:
        if known and key not in known:
            problem(str(TOML_FILE.relative_to(REPO)), f"unknown key {key!r} (not a field of ServeArgs or PromptArgs)")
    docs = [d for d in yaml.safe_load_all(CONFIGMAP.read_text()) if d]
    data = docs[0].get("data", {}) if docs else {}
    if data.get("asap-proxy.toml") != text:
        problem(str(CONFIGMAP.relative_to(REPO)),
                "data.asap-proxy.toml differs from deploy/config/asap-proxy.toml")


def has_health_probe(container: dict, kind: str) -> bool:
    probe = container.get(kind) or {}
    if probe.get("httpGet", {}).get("path") == "/health":
        return True
    command = " ".join(probe.get("exec", {}).get("command", []))
    return "/health" in command


def check_pod(where: str, template: dict) -> None:
    meta = template.get("metadata", {})
    spec = template.get("spec", {})
    notes = meta.get("annotations", {})
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(PROXY_PORT),
            "prometheus.io/path": "/metrics"}
    for key, value in want.items():
        if notes.get(key) != value:
            problem(where, f"annotation {key} should be {value!r}, is {notes.get(key)!r}")
    pod_sc = spec.get("securityContext", {})
    proxies = [c for c in spec.get("containers", []) + spec.get("initContainers", [])
               if c.get("name") == "asap-proxy"]
    if not proxies:
        problem(where, "no container named asap-proxy")
    for c in proxies:
        name = f"{where} container {c['name']}"
        for kind in ("livenessProbe", "readinessProbe"):
            if not has_health_probe(c, kind):
                problem(name, f"{kind} does not check /health")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in res.get(part, {}):
                    problem(name, f"resources.{part}.{r} missing")
        sc = c.get("securityContext", {})
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            problem(name, "runAsNonRoot is not set")
        if sc.get("allowPrivilegeEscalation") is not False:
            problem(name, "allowPrivilegeEscalation should be false")
    for c in spec.get("initContainers", []):
        if c.get("name") == "asap-proxy" and c.get("restartPolicy") != "Always":
            problem(where, "the asap-proxy init container must be a native sidecar "
                           "(restartPolicy: Always)")


def check_manifests() -> None:
    files = sorted((DEPLOY / "k8s").rglob("*.yaml"))
    if not files:
        problem("deploy/k8s", "no manifests")
    for path in files:
        rel = str(path.relative_to(REPO))
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            kind = doc.get("kind")
            if kind == "Deployment":
                check_pod(f"{rel} {kind}", doc["spec"]["template"])
            elif kind == "Job":
                check_pod(f"{rel} {kind}", doc["spec"]["template"])


def main() -> int:
    check_config()
    check_manifests()
    for p in problems:
        print(f"check_manifests: {p}")
    if not problems:
        print("check_manifests: config and pod rules ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

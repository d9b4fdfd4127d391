#!/usr/bin/env python3
"""Probe a running llama-server (started by scripts/model-server.sh) and print
what its OpenAI-style completion API really returns. Standard library only.

    python3 scripts/probe-model-server.py --port N [--out report.md]

Everything goes to 127.0.0.1:N. Used to write scripts/MODEL-NOTES.md.
"""
import argparse
import http.client
import json
import sys
import time

AGENT_PROMPT = """# Task

The function `add(a, b)` in `calc.py` returns `a - b` instead of `a + b`.
Fix the bug so that `python3 -m pytest test_calc.py` passes.

# Tools

You work in a Linux shell. To run a command, write it inside a bash tag:
<bash>command</bash>
The command's output is then shown to you inside <observation> ... </observation>.
When the task is done, write <submit/> on its own line.

# Trajectory

## Thinking
I should look at the files in the current directory first.

<bash>ls</bash>

<observation>
calc.py
test_calc.py
</observation>

## Thinking
"""

STOP = ["<observation>", "\n## Thinking"]


class Client:
    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, timeout=300):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        t0 = time.monotonic()
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        dt = time.monotonic() - t0
        conn.close()
        return resp.status, raw.decode("utf-8", "replace"), dt

    def json(self, method, path, body=None):
        status, raw, dt = self.request(method, path, body)
        try:
            return status, json.loads(raw), dt
        except json.JSONDecodeError:
            return status, raw, dt

    def stream_raw(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        headers = dict(resp.getheaders())
        raw = resp.read().decode("utf-8", "replace")
        conn.close()
        return resp.status, headers, raw

    def n_tokens(self, text):
        _, d, _ = self.json("POST", "/tokenize", {"content": text})
        return len(d["tokens"])


def section(out, title):
    out.append(f"\n## {title}\n")


def code(out, text, lang=""):
    out.append(f"```{lang}\n{text.rstrip()}\n```\n")


def filler(n_blocks, tag):
    """Append-only agent-shaped filler: bash steps with observations."""
    parts = []
    for i in range(n_blocks):
        parts.append(
            f"I will inspect part {i} of the {tag} log.\n\n"
            f"<bash>sed -n {i*20+1},{i*20+20}p build-{tag}.log</bash>\n\n"
            f"<observation>\n"
            + "".join(f"line {i*20+j}: compiling module_{tag}_{i}_{j}.rs ... ok\n" for j in range(8))
            + "</observation>\n\n## Thinking\n"
        )
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out")
    ap.add_argument("--overlong", action="store_true", help="also send a prompt over the context size")
    a = ap.parse_args()
    c = Client(a.port)
    out = []

    section(out, "GET /health")
    st, raw, _ = c.request("GET", "/health")
    code(out, f"HTTP {st}\n{raw}")

    section(out, "GET /v1/models")
    st, d, _ = c.json("GET", "/v1/models")
    code(out, f"HTTP {st}\n" + json.dumps(d, indent=2), "json")

    section(out, "GET /props (selected keys)")
    st, d, _ = c.json("GET", "/props")
    if isinstance(d, dict):
        sel = {k: d.get(k) for k in ("total_slots", "model_path", "build_info", "modalities")}
        sel["default_generation_settings.n_ctx"] = d.get("default_generation_settings", {}).get("n_ctx")
        code(out, f"HTTP {st}\n" + json.dumps(sel, indent=2), "json")
    else:
        code(out, f"HTTP {st}\n{d}")

    # Prompt whose continuation should hit the stop string.
    stop_prompt = (
        "<bash>ls</bash>\n\n<observation>\na.txt\n</observation>\n\n"
        "<bash>cat a.txt</bash>\n\n<observation>\nhello\n</observation>\n\n"
        "<bash>wc -l a.txt</bash>\n\n<observation>\n1 a.txt\n</observation>\n\n"
        "<bash>pwd</bash>\n\n"
    )
    section(out, "POST /v1/completions, non-streaming, stop hit")
    body = {"prompt": stop_prompt, "max_tokens": 32, "temperature": 0, "stop": ["<observation>"]}
    code(out, "request: " + json.dumps(body), "json")
    st, d, dt = c.json("POST", "/v1/completions", body)
    code(out, f"HTTP {st} ({dt:.2f} s)\n" + json.dumps(d, indent=2), "json")

    section(out, "POST /v1/completions, non-streaming, max_tokens reached")
    body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0, "stop": ["<observation>"]}
    code(out, "request: " + json.dumps(body), "json")
    st, d, dt = c.json("POST", "/v1/completions", body)
    code(out, f"HTTP {st} ({dt:.2f} s)\n" + json.dumps(d, indent=2), "json")

    section(out, "POST /v1/completions, stream: true, stop hit (raw SSE bytes)")
    body = {"prompt": stop_prompt, "max_tokens": 32, "temperature": 0, "stop": ["<observation>"], "stream": True}
    code(out, "request: " + json.dumps(body), "json")
    st, headers, raw = c.stream_raw("/v1/completions", body)
    code(out, f"HTTP {st}\nContent-Type: {headers.get('Content-Type')}\n\n{raw}")

    section(out, "POST /v1/completions, stream: true, max_tokens reached (raw SSE bytes)")
    body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0, "stream": True}
    code(out, "request: " + json.dumps(body), "json")
    st, headers, raw = c.stream_raw("/v1/completions", body)
    code(out, f"HTTP {st}\n\n{raw}")

    section(out, "Native POST /completion (non-OAI): reports stop_type and stopping_word")
    body = {"prompt": stop_prompt, "n_predict": 32, "temperature": 0, "stop": ["<observation>", "\n## Thinking"]}
    code(out, "request: " + json.dumps(body), "json")
    st, d, dt = c.json("POST", "/completion", body)
    if isinstance(d, dict):
        d.pop("generation_settings", None)
        d["prompt"] = d.get("prompt", "")[:40] + "...(cut here)"
    code(out, f"HTTP {st} ({dt:.2f} s) (generation_settings dropped, prompt cut)\n" + json.dumps(d, indent=2), "json")
    body["stream"] = True
    st, headers, raw = c.stream_raw("/completion", body)
    lines = [l for l in raw.split("\n") if l.strip()]
    out.append("same with stream: true (raw SSE; long final chunk cut at 600 chars)\n")
    code(out, f"HTTP {st}\n\n" + "\n\n".join(l if len(l) < 600 else l[:600] + "...(cut here)" for l in lines))

    # Prompt cache: ~2000-token agent-shaped prompt, then the same + ~100 tokens.
    section(out, "Prompt cache (append-only growth)")
    k = 1
    while c.n_tokens(AGENT_PROMPT + filler(k, "cache")) < 2000:
        k += 1
    p1 = AGENT_PROMPT + filler(k, "cache")
    extra = filler(1, "extra")
    p2 = p1 + extra
    n1, n2 = c.n_tokens(p1), c.n_tokens(p2)
    rows = []
    for label, prompt, cp in (
        ("1. ~2000-token prompt, first time", p1, True),
        ("2. same prompt + ~100 tokens appended", p2, True),
        ("3. same as 2 again (identical)", p2, True),
        ("4. as 2 with cache_prompt=false", p2, False),
    ):
        body = {"prompt": prompt, "max_tokens": 128, "temperature": 0, "stop": STOP,
                "cache_prompt": cp}
        st, d, dt = c.json("POST", "/v1/completions", body)
        tm = d.get("timings", {}) if isinstance(d, dict) else {}
        usage = d.get("usage", {}) if isinstance(d, dict) else {}
        rows.append((label, st, dt, tm, usage))
    out.append(f"prompt 1: {n1} tokens; prompt 2: {n2} tokens (prompt 1 + {n2-n1}); max_tokens 128, temperature 0, stop {json.dumps(STOP)}\n\n")
    out.append("| request | HTTP | wall s | timings.cache_n | timings.prompt_n | prompt_ms | predicted_n | predicted_ms |\n|---|---|---|---|---|---|---|---|\n")
    for label, st, dt, tm, usage in rows:
        out.append(f"| {label} | {st} | {dt:.2f} | {tm.get('cache_n')} | {tm.get('prompt_n')} | {tm.get('prompt_ms', 0):.0f} | {tm.get('predicted_n')} | {tm.get('predicted_ms', 0):.0f} |\n")
    out.append("\nFull `timings` and `usage` of request 2:\n")
    code(out, json.dumps({"timings": rows[1][3], "usage": rows[1][4]}, indent=2), "json")

    section(out, "Prompt cache in an agent loop (prompt = previous prompt + generated text + observation)")
    prompt = p1
    out.append("| step | prompt tokens | wall s | cache_n | prompt_n | prompt_ms | predicted_n | predicted_ms |\n|---|---|---|---|---|---|---|---|\n")
    for step in range(3):
        body = {"prompt": prompt, "max_tokens": 64, "temperature": 0, "stop": STOP}
        st, d, dt = c.json("POST", "/v1/completions", body)
        tm = d.get("timings", {})
        out.append(f"| {step+1} | {d['usage']['prompt_tokens']} | {dt:.2f} | {tm.get('cache_n')} | {tm.get('prompt_n')} | {tm.get('prompt_ms', 0):.0f} | {tm.get('predicted_n')} | {tm.get('predicted_ms', 0):.0f} |\n")
        prompt = prompt + d["choices"][0]["text"] + f"<observation>\nresult of step {step}: ok\n</observation>\n\n## Thinking\n"

    section(out, "Samples: agent-shaped prompt, stop " + json.dumps(STOP) + ", max_tokens 256")
    code(out, AGENT_PROMPT, "markdown")
    for temp, seed in ((0, 1), (0.7, 1), (0.7, 2)):
        body = {"prompt": AGENT_PROMPT, "max_tokens": 256, "temperature": temp, "seed": seed, "stop": STOP}
        st, d, dt = c.json("POST", "/v1/completions", body)
        ch = d["choices"][0]
        out.append(f"\n### temperature {temp}, seed {seed}: HTTP {st}, {dt:.2f} s, finish_reason={ch.get('finish_reason')!r}, "
                   f"stop_reason={ch.get('stop_reason')!r}, completion_tokens={d.get('usage', {}).get('completion_tokens')}\n")
        out.append("Raw `text` (JSON-escaped, exact):\n")
        code(out, json.dumps(ch["text"]))
        out.append("As text:\n")
        code(out, ch["text"] if ch["text"].strip() else "(empty)")

    if a.overlong:
        section(out, "Over-long prompt")
        _, props, _ = c.json("GET", "/props")
        n_ctx = props.get("default_generation_settings", {}).get("n_ctx", 8192)
        text = filler(1, "long")
        reps = n_ctx // max(1, c.n_tokens(text)) + 5
        prompt = text * reps
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 0}
        st, raw, dt = c.request("POST", "/v1/completions", body)
        out.append(f"prompt of {c.n_tokens(prompt)} tokens, n_ctx {n_ctx}\n")
        code(out, f"HTTP {st} ({dt:.2f} s)\n{raw}")
        body["stream"] = True
        st, headers, raw = c.stream_raw("/v1/completions", body)
        out.append("same with stream: true\n")
        code(out, f"HTTP {st}\nContent-Type: {headers.get('Content-Type')}\n\n{raw}")

    text = "".join(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

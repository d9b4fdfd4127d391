#!/usr/bin/env python3
"""Fake base-model backend for the real-client tests (stdlib only).

Serves the subset of the OpenAI legacy completions API that vLLM and
llama-server expose and that asap-proxy calls:

* ``POST /v1/completions``: answers with scripted continuation texts, one per
  call, in order; after the list ends the last entry repeats. ``stream: true``
  is answered with SSE chunks (several text pieces, a final chunk carrying
  ``finish_reason``, a usage chunk when ``stream_options.include_usage`` is
  set, then ``data: [DONE]``).
* ``GET /v1/models``: one model, ``fake-base``, with ``max_model_len`` 32768 (no ``/tokenize``: the proxy estimates 1 token per 2 bytes).
* ``GET /health``: 200.

Like vLLM without ``include_stop_str_in_output``, the returned text never
contains a stop string of the request: a scripted text is cut at the first
stop string it contains, and ``stop_reason`` names the string that matched
(``"<observation>"`` when the script entry contains none, as if the model had
gone on to write the observation tag).

A script entry is either a string (the continuation) or an object
``{"text": str, "finish_reason": str, "stop_reason": str|null}`` for cases
that need another finish reason, or ``{"status": int, "message": str}`` to
answer that call with an HTTP error and an OpenAI-style error body, or
``{"overflow": name}`` to answer it as that backend answers a prompt longer than
its context window (``OVERFLOWS``: status and body as the real server sends them).

Every request body received on a POST is appended to the record file as one
JSON line (non-JSON bodies are recorded as ``{"_raw": "<text>"}``).

Usage::

    python fake_backend.py --port 0 --script script.json --record record.jsonl

The first stdout line is ``PORT <n>``, the port actually bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_ID = "fake-base"
MAX_MODEL_LEN = 32768
DEFAULT_STOP_REASON = "<observation>"

# Each backend's answer to a prompt longer than its context window: (status, body).
OVERFLOWS = {
    # llama-server since 2025-09: 400 (500 in some builds) with the token counts.
    "llama-server": (400, {"error": {
        "code": 400,
        "message": "request (40000 tokens) exceeds the available context size (32768 tokens), try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 40000, "n_ctx": 32768}}),
    # llama-server, older builds and some paths: 500, no numbers.
    "llama-server-500": (500, {"error": {
        "code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}),
    "vllm": (400, {
        "object": "error",
        "message": "The decoder prompt (length 40000) is longer than the maximum model length of 32768. "
                   "Make sure that `max_model_len` is no smaller than the number of text tokens.",
        "type": "BadRequestError", "param": None, "code": 400}),
    "sglang": (400, {
        "object": "error",
        "message": "The input (40000 tokens) is longer than the model's context length (32768 tokens).",
        "type": "BadRequestError", "param": None, "code": 400}),
    "tgi": (422, {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 32768. "
                 "Given: 40000 `inputs` tokens and 1024 `max_new_tokens`",
        "error_type": "validation"}),
}


class Script:
    """Scripted continuations handed out in order, the last one repeating."""

    def __init__(self, entries: list) -> None:
        if not entries:
            raise ValueError("script must hold at least one entry")
        self._entries = [self._normalise(e) for e in entries]
        self._next = 0
        self._lock = threading.Lock()

    @staticmethod
    def _normalise(entry) -> dict:
        if isinstance(entry, str):
            return {"text": entry, "finish_reason": "stop", "stop_reason": DEFAULT_STOP_REASON}
        if isinstance(entry, dict) and entry.get("overflow") in OVERFLOWS:
            status, body = OVERFLOWS[entry["overflow"]]
            return {"status": status, "body": body}
        if isinstance(entry, dict) and isinstance(entry.get("status"), int):
            return {"status": entry["status"], "message": entry.get("message", "scripted error")}
        if isinstance(entry, dict) and isinstance(entry.get("text"), str):
            return {
                "text": entry["text"],
                "finish_reason": entry.get("finish_reason", "stop"),
                "stop_reason": entry.get("stop_reason", DEFAULT_STOP_REASON),
            }
        raise ValueError(f"bad script entry: {entry!r}")

    def take(self) -> dict:
        with self._lock:
            index = min(self._next, len(self._entries) - 1)
            self._next += 1
            return dict(self._entries[index])


def apply_stop(entry: dict, stop) -> dict:
    """Cut the text at the earliest stop string, as vLLM does by default."""
    if isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list):
        stops = [s for s in stop if isinstance(s, str) and s]
    else:
        stops = []
    best = None
    for s in stops:
        at = entry["text"].find(s)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, s)
    if best is not None:
        entry["text"] = entry["text"][: best[0]]
        entry["finish_reason"] = "stop"
        entry["stop_reason"] = best[1]
    return entry


def prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(p for p in prompt if isinstance(p, str))
    return ""


def split_pieces(text: str, n: int = 4) -> list[str]:
    """Split text into up to n non-empty pieces (at least one, maybe empty)."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-backend/1"

    # Quiet: the test harness captures stderr, keep it for real problems.
    def log_message(self, fmt, *args):  # noqa: D401
        pass

    # -- helpers -----------------------------------------------------------
    def _send_json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _record(self, raw: bytes):
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        line = json.dumps(body, ensure_ascii=False) + "\n"
        with self.server.record_lock:  # type: ignore[attr-defined]
            with open(self.server.record_path, "a", encoding="utf-8") as f:  # type: ignore[attr-defined]
                f.write(line)
        return body

    # -- routes ------------------------------------------------------------
    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL_ID,
                            "object": "model",
                            "created": 0,
                            "owned_by": "fake",
                            "max_model_len": MAX_MODEL_LEN,
                        }
                    ],
                },
            )
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(404, {"error": {"message": f"no route GET {path}", "type": "not_found"}})

    def do_POST(self):
        path = self.path.split("?")[0]
        raw = self._read_body()
        req = self._record(raw)
        if path != "/v1/completions":
            self._send_json(404, {"error": {"message": f"no route POST {path}", "type": "not_found"}})
            return
        if not isinstance(req, dict) or "_raw" in req or "prompt" not in req:
            self._send_json(400, {"error": {"message": "body must be JSON with a prompt", "type": "invalid_request_error"}})
            return

        entry = self.server.script.take()  # type: ignore[attr-defined]
        if "body" in entry:
            self._send_json(entry["status"], entry["body"])
            return
        if "status" in entry:
            self._send_json(entry["status"], {"error": {"message": entry["message"], "type": "server_error",
                                                        "param": None, "code": entry["status"]}})
            return
        entry = apply_stop(entry, req.get("stop"))
        text = entry["text"]
        prompt_tokens = len(prompt_text(req.get("prompt")).split())
        completion_tokens = len(text.split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        cid = "cmpl-" + uuid.uuid4().hex
        created = int(time.time())
        model = req.get("model") or MODEL_ID

        if not req.get("stream"):
            self._send_json(
                200,
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": text,
                            "finish_reason": entry["finish_reason"],
                            "logprobs": None,
                            "stop_reason": entry["stop_reason"],
                        }
                    ],
                    "usage": usage,
                },
            )
            return

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj) -> None:
            self._write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def chunk(piece: str, finish_reason, stop_reason) -> dict:
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": piece,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                        "stop_reason": stop_reason,
                    }
                ],
            }

        try:
            for piece in split_pieces(text):
                event(chunk(piece, None, None))
            event(chunk("", entry["finish_reason"], entry["stop_reason"]))
            opts = req.get("stream_options") or {}
            if isinstance(opts, dict) and opts.get("include_usage"):
                event({"id": cid, "object": "text_completion", "created": created, "model": model,
                       "choices": [], "usage": usage})
            self._write_chunk(b"data: [DONE]\n\n")
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", required=True, help="JSON list of continuation texts")
    ap.add_argument("--record", required=True, help="JSONL file each request body is appended to")
    args = ap.parse_args(argv)

    with open(args.script, encoding="utf-8") as f:
        script = Script(json.load(f))

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.script = script  # type: ignore[attr-defined]
    server.record_path = args.record  # type: ignore[attr-defined]
    server.record_lock = threading.Lock()  # type: ignore[attr-defined]
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

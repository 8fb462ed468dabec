"""A scripted OpenAI-compatible chat server: the one edge we do not own, run for real.

Tests start it as its own process (`python -m tests.scripted_model --port P`) and point the
server's model settings at it. It answers ``POST /v1/chat/completions`` from rules the test
sets over HTTP, and records every request it got:

- ``POST /_script {"rules": [...], "default": rule?}`` replaces the rules (``"append": true``
  adds to them). A rule: ``{"match": "text in the prompt", "reply": "content" | {json},
  "status": 200, "delay": 0.0, "headers": {}, "times": N?}``. The first rule whose ``match``
  occurs in the request's messages and has ``times`` left answers. No rule: the ``default``
  rule, else HTTP 500 ``no rule matched``.
- ``GET /_calls`` lists the requests (model, messages, the rule that answered);
  ``DELETE /_calls`` clears them.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_rules: list[dict[str, Any]] = []
_default: dict[str, Any] | None = None
_calls: list[dict[str, Any]] = []


def _pick(prompt: str) -> tuple[int | None, dict[str, Any] | None]:
    with _lock:
        for i, rule in enumerate(_rules):
            if rule.get("match", "") in prompt and rule.get("times", 1) != 0:
                if "times" in rule:
                    rule["times"] -= 1
                return i, rule
    return None, _default


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet: tests read /_calls instead
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        size = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(size) or b"{}")

    def do_GET(self) -> None:
        if self.path == "/_calls":
            with _lock:
                self._send(200, list(_calls))
        elif self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        elif self.path == "/_health":
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_DELETE(self) -> None:
        if self.path == "/_calls":
            with _lock:
                _calls.clear()
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        global _default
        body = self._body()
        if self.path == "/_script":
            with _lock:
                if not body.get("append"):
                    _rules.clear()
                _rules.extend(body.get("rules", []))
                if "default" in body or not body.get("append"):
                    _default = body.get("default")
            self._send(200, {"rules": len(_rules)})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": "not found"}})
            return
        messages = body.get("messages", [])
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        index, rule = _pick(prompt)
        with _lock:
            _calls.append({"model": body.get("model"), "messages": messages, "rule": index,
                           "response_format": body.get("response_format")})
        if rule is None:
            self._send(500, {"error": {"message": "no rule matched", "type": "server_error"}})
            return
        time.sleep(float(rule.get("delay", 0)))
        status = int(rule.get("status", 200))
        if status != 200:
            self._send(status, {"error": {"message": f"scripted {status}", "type": "error"}},
                       rule.get("headers"))
            return
        reply = rule.get("reply", "")
        content = reply if isinstance(reply, str) else json.dumps(reply)
        self._send(200, {
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }, rule.get("headers"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()

"""A fake OpenAI-compatible chat-completions endpoint on 127.0.0.1 (a real HTTP server in a
thread) for the judge's tests: it records each request and answers as `mode` says."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeJudge:
    def __init__(self) -> None:
        self.mode = "covered"  # covered | not_covered | contradicted | error | slow | garbage
        self.requests: list[dict] = []
        self.delay_s = 0.0  # answer this late (a slow model), whatever the mode
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        server.daemon_threads = True
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                if fake.mode == "error":
                    return self._send(500, {"error": {"message": "boom"}})
                time.sleep(fake.delay_s)
                if fake.mode == "slow":
                    time.sleep(3)
                content = (
                    "this is not json"
                    if fake.mode == "garbage"
                    else json.dumps(
                        {
                            "verdict": fake.mode if fake.mode != "slow" else "covered",
                            "evidence": "quoted words",
                            "reason": f"judged {fake.mode}",
                        }
                    )
                )
                self._send(
                    200,
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)  # (the client may have timed out first)

        return Handler

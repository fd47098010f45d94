"""A fault-injecting HTTP proxy in front of the S3 server: fails a fraction of requests with 503, or
streams responses slowly, so tests can exercise retries and crashes mid-download."""

from __future__ import annotations

import http.client
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultProxy:
    """Forwards every request to ``target``; ``fail_rate`` of them get a 503 SlowDown instead."""

    def __init__(self, target: str, fail_rate: float = 0.0, seed: int = 0, delay_per_chunk: float = 0.0) -> None:
        self.target = urlsplit(target)
        self.fail_rate = fail_rate
        self.delay_per_chunk = delay_per_chunk
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.failed = 0
        self.forwarded = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy.lock:
                    fail = proxy.rng.random() < proxy.fail_rate
                    proxy.failed += fail
                    proxy.forwarded += not fail
                if fail:
                    payload = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                               b"<Message>Please reduce your request rate.</Message></Error>")
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.target.hostname}:{proxy.target.port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    for i in range(0, len(data), 64 << 10):
                        self.wfile.write(data[i : i + (64 << 10)])
                        if proxy.delay_per_chunk:
                            time.sleep(proxy.delay_per_chunk)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

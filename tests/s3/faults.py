"""A fault-injecting HTTP proxy in front of the S3 server: fails a fraction of requests with a 503
that s3fs does not retry itself, answers 403 AccessDenied for chosen keys, streams responses slowly,
and records every request, so tests can exercise datapipe's retries, permanent errors, crashes
mid-download and the order and overlap of a commit's requests."""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

# ServiceUnavailable, not SlowDown: s3fs retries only SlowDown / "reduce your request rate" among S3
# error codes, so with botocore's own retries off (total_max_attempts=1) every injected failure
# reaches datapipe
UNAVAILABLE = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
    b"<Message>Service is unable to handle request.</Message></Error>"
)
DENIED = (
    b'<?xml version="1.0" '
    b'encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access '
    b"Denied</Message></Error>"
)
# what S3 answers a request sent to another region than the bucket's
MOVED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PermanentRedirect</Code>'
    b"<Message>The bucket you are attempting to access must be addressed "
    b"using the specified endpoint. "
    b"Please send all future requests to this endpoint.</Message></Error>"
)


class FaultProxy:
    """Forwards every request to ``target``; ``fail_rate`` of the GETs (of ``fail_methods``) get a
    503 ServiceUnavailable instead, any request whose path ends with a suffix in ``deny`` gets a 403
    AccessDenied, and one whose path ends with a suffix in ``moved`` a 301 PermanentRedirect (a
    bucket in another region).

    ``log`` holds (method, path, status, start, end, copy source) of every request (a listing's path
    is /bucket/prefix); ``gets`` counts successful GETs per path; ``max_copies`` is the most
    server-side copies that were in flight at once.
    """

    def __init__(
        self,
        target: str,
        fail_rate: float = 0.0,
        seed: int = 0,
        delay_per_chunk: float = 0.0,
        copy_delay: float = 0.0,
        fail_methods: tuple[str, ...] = ("GET",),
    ) -> None:
        self.target = urlsplit(target)
        self.fail_rate = fail_rate
        self.fail_methods = fail_methods
        self.delay_per_chunk = delay_per_chunk
        self.copy_delay = copy_delay
        self.deny: set[str] = set()
        self.moved: set[str] = set()
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.failed = 0
        self.forwarded = 0
        self.log: list[tuple[str, str, int, float, float, str | None]] = []
        self.gets: Counter[str] = Counter()
        self.copies_in_flight = 0
        self.max_copies = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                start = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                url = urlsplit(self.path)
                path = unquote(url.path)
                prefix = parse_qs(url.query).get("prefix")
                if prefix:  # a listing: logged as the prefix it lists
                    path = f"{path.rstrip('/')}/{prefix[0].rstrip('/')}"
                copy_source = self.headers.get("x-amz-copy-source")
                status, headers, data = self._forward(path, body, copy_source)
                # Logged before the reply goes out: the client may act on the reply (and a test read
                # the log) before this thread runs again.
                with proxy.lock:
                    proxy.log.append(
                        (self.command, path, status, start, time.monotonic(), copy_source)
                    )
                    if self.command == "GET" and status < 300:
                        proxy.gets[path] += 1
                self._send(status, headers, data)

            def _forward(
                self, path: str, body: bytes | None, copy_source: str | None
            ) -> tuple[int, list[tuple[str, str]], bytes]:
                """The reply to send: a fault of the proxy's own, or the target's."""
                with proxy.lock:
                    denied = any(path.endswith(suffix) for suffix in proxy.deny)
                    moved = any(path.endswith(suffix) for suffix in proxy.moved)
                    fail = (
                        not (denied or moved)
                        and self.command in proxy.fail_methods
                        and proxy.rng.random() < proxy.fail_rate
                    )
                    proxy.failed += fail
                    proxy.forwarded += not (fail or denied or moved)
                for fault, status, payload in (
                    (denied, 403, DENIED),
                    (moved, 301, MOVED),
                    (fail, 503, UNAVAILABLE),
                ):
                    if fault:
                        return status, [("Content-Type", "application/xml")], payload
                if copy_source:
                    with proxy.lock:
                        proxy.copies_in_flight += 1
                        proxy.max_copies = max(proxy.max_copies, proxy.copies_in_flight)
                    time.sleep(proxy.copy_delay)
                conn = http.client.HTTPConnection(
                    proxy.target.hostname, proxy.target.port, timeout=60
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    headers["Host"] = f"{proxy.target.hostname}:{proxy.target.port}"
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                finally:
                    conn.close()
                    if copy_source:
                        with proxy.lock:
                            proxy.copies_in_flight -= 1
                kept = [
                    (k, v)
                    for k, v in response.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "content-length")
                ]
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                kept.append(("Content-Length", length or str(len(data))))
                return response.status, kept, data

            def _send(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k == "Content-Length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    for i in range(0, len(data), 64 << 10):
                        self.wfile.write(data[i : i + (64 << 10)])
                        if proxy.delay_per_chunk:
                            time.sleep(proxy.delay_per_chunk)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

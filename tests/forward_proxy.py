"""A forwarding HTTP proxy for the tests, run as a process of its own on 127.0.0.1: what
`--proxy` and HLOBUNDLE_PROXY name. It forwards a request in absolute form (`GET http://...`)
to its host and answers with what came back, tunnels a CONNECT (TLS passes through it
unread), and writes every request line and its headers to the log file it is given, one JSON
object a line, before it forwards anything.

    python tests/forward_proxy.py LOG   # prints the port it listens on, then serves
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _record(self) -> None:
        line = json.dumps({"request": self.requestline, "headers": dict(self.headers)})
        with self.lock, open(self.log_path, "a") as log:
            log.write(line + "\n")

    def do_CONNECT(self) -> None:  # noqa: N802
        self._record()
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=30)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self._tunnel(self.connection, upstream)
        self.close_connection = True

    @staticmethod
    def _tunnel(a: socket.socket, b: socket.socket) -> None:
        with b:
            while True:
                ready, _, _ = select.select([a, b], [], [], 30)
                if not ready:
                    return
                for source in ready:
                    data = source.recv(1 << 16)
                    if not data:
                        return
                    (b if source is a else a).sendall(data)

    def _forward(self) -> None:
        self._record()
        parts = urlsplit(self.path)
        if parts.scheme != "http" or not parts.hostname:
            self.send_error(400, "a proxy request is in absolute form")
            return
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        upstream = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        try:
            upstream.request(self.command, target or "/", body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            upstream.close()
        self.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            pieces = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                pieces.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # the trailer
            return b"".join(pieces)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


def main() -> None:
    Handler.log_path = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

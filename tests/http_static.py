"""A static file server on 127.0.0.1 for remote-loading tests: it serves a directory, honours
single Range requests (206 with Content-Range), and counts the body bytes it sends. `mode`
makes it hostile: "ignore-range" (200 and the whole file), "redirect" (302 to another host),
"endless" (a body past a file but the manifest, without Content-Length), "wrong-range" (a
Content-Range for other bytes), "corrupt" (every byte of weights.safetensors after its header
flipped), "drip" (a byte every 50 ms), "gzip" (a gzip bomb of 64 MiB of zeros, as
Content-Encoding, though identity was asked). `files` serves given bytes (or any object with `len` and slicing, such as
`Sparse`) at a path instead of the directory's file."""

from __future__ import annotations

import functools
import gzip
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


def throwaway_ca(directory: Path, *hosts: str) -> tuple[Path, ssl.SSLContext]:
    """A certificate authority made for one test (`ca.pem` in `directory`), and a server's
    TLS context whose certificate it signed for the IP addresses `hosts`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject, key, issuer, issuer_key, ca):  # noqa: ANN001, ANN202
        built = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            # Python 3.13's default (VERIFY_X509_STRICT) wants both key identifiers
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
            )
        )
        if ca:  # a CA certificate with key usage, as strict verification also wants
            usage = x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            )
            built = built.add_extension(usage, critical=True)
        else:
            names = [x509.IPAddress(ipaddress.ip_address(h)) for h in hosts]
            built = built.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return built.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(
        certificate("throwaway CA", ca_key, "throwaway CA", ca_key, True).public_bytes(pem)
    )
    (directory / "server.pem").write_bytes(
        certificate(hosts[0], key, "throwaway CA", ca_key, False).public_bytes(pem)
    )
    (directory / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "server.pem", directory / "server.key")
    return directory / "ca.pem", context


@functools.cache
def gzip_bomb() -> bytes:
    """64 MiB of zeros, gzipped (65 KB)."""
    return gzip.compress(bytes(64 << 20), compresslevel=9)


class StaticServer:
    def __init__(self, root: Path, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self.mode = ""
        self.sent = 0
        self.requests: list[tuple[str, str]] = []  # (path, Range header)
        self.files: dict[str, object] = {}  # URL path -> bytes (or a `Sparse`)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms wait per answer (oci_fake.py says why)

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        # a client that hung up (a load that refused the answer, as tested): not a traceback
        # on the suite's output
        self.httpd.handle_error = lambda request, address: None
        self.thread = threading.Thread(  # polls every 20 ms: `close()` waits for one poll
            target=self.httpd.serve_forever, args=(0.02,), daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}/"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: object, headers: dict) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if "Content-Length" not in headers and headers.get("Connection") != "close":
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:  # in pieces: what was sent before the client closed is what is counted
            for i in range(0, len(body), 1 << 20):
                piece = bytes(body[i : i + (1 << 20)])
                h.wfile.write(piece)
                self.sent += len(piece)
        except OSError:
            h.close_connection = True

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        rng = h.headers.get("Range", "")
        self.requests.append((h.path, rng))
        if self.mode == "redirect":
            return self._send(h, 302, b"", {"Location": "http://example.com/elsewhere"})
        path = self.root / unquote(h.path.lstrip("/"))
        data = self.files.get(h.path)
        if data is None and not path.is_file():
            return self._send(h, 404, b"", {})
        if data is None:
            data = path.read_bytes()
        if self.mode == "corrupt" and path.name == "weights.safetensors":
            n = 8 + int.from_bytes(data[:8], "little")
            data = data[:n] + bytes(b ^ 0xFF for b in data[n:])
        if self.mode == "drip":  # a byte at a time, each well inside any read timeout
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            try:
                for i in range(len(data)):
                    h.wfile.write(bytes(data[i : i + 1]))
                    h.wfile.flush()
                    self.sent += 1
                    time.sleep(0.05)
            except OSError:
                h.close_connection = True
            return None
        if self.mode == "gzip":  # a gzip bomb, though identity was asked: 64 MiB of zeros
            return self._send(h, 200, gzip_bomb(), {"Content-Encoding": "gzip"})
        if self.mode == "endless" and path.name != "manifest.json":
            h.close_connection = True
            return self._send(h, 200, data + b"\0" * (1 << 20), {"Connection": "close"})
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
        if not match or self.mode == "ignore-range":
            return self._send(h, 200, data, {})
        begin = int(match[1])
        end = int(match[2]) + 1 if match[2] else len(data)
        end = min(end, len(data))
        shown = (begin + 1, end + 1) if self.mode == "wrong-range" else (begin, end)
        headers = {"Content-Range": f"bytes {shown[0]}-{shown[1] - 1}/{len(data)}"}
        return self._send(h, 206, bytes(data[begin:end]), headers)


class Sparse:
    """A file of `size` bytes that is `prefix`, then zeros, without holding them."""

    def __init__(self, size: int, prefix: bytes) -> None:
        self.size, self.prefix = size, prefix

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, s: slice) -> bytes:
        begin, end, _ = s.indices(self.size)
        head = self.prefix[begin:end]
        return head + bytes(max(0, end - begin - len(head)))


class CountingProxy:
    """A TCP proxy on 127.0.0.1 in front of `target` ("HOST:PORT") that counts the bytes the
    target sends back (what a client fetched from a registry, headers included)."""

    def __init__(self, target: str) -> None:
        import socket

        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.received = 0
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source, sink, count: bool) -> None:  # noqa: ANN001
        try:
            while data := source.recv(1 << 16):
                if count:
                    with self._lock:
                        self.received += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(2)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.listener.close()

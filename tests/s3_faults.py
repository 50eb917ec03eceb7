"""A moto S3 server for tests, and a fault-injecting HTTP proxy to put in front of it.

:func:`moto_server` starts ``moto_server`` (``moto[server]``, the dev extras) on a free port.
:class:`FaultProxy` forwards HTTP/1.1 requests (keep-alive, ``Content-Length`` and chunked
bodies) to it byte for byte and, on a seeded fraction ``rate`` of requests, instead:

- ``slowdown``: answers ``503 SlowDown`` with S3's XML error body (the request never reaches
  the server, as when S3 throttles);
- ``reset``: resets the connection (TCP RST, nothing answered, nothing forwarded);
- ``drop``: forwards the request, then resets the connection instead of answering (the
  server acted, the client never hears: a retried request runs twice);
- ``delay``: forwards the request, then holds the response's first byte ``delay_s`` seconds.

``counts`` holds how many of each it injected and ``requests`` how many requests it saw.
``close()`` stops it: afterwards nothing listens on its port (an endpoint down for good).
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from typing import BinaryIO, Iterator

KINDS = ("slowdown", "reset", "drop", "delay")

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>FAULTPROXY</RequestId><HostId>faultproxy</HostId></Error>"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 and a free port; yields its URL (``None`` if
    ``moto_server`` is not installed)."""
    exe = shutil.which("moto_server")
    if exe is None:
        yield None
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [exe, "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except Exception as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server must answer on {url} within 30 s (found {err})") from err
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _read_head(src: BinaryIO) -> bytes | None:
    """The start line and headers (through the blank line), or None at end of stream."""
    lines = []
    while True:
        line = src.readline(65537)
        if not line:
            return None if not lines else b"".join(lines)
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _headers(head: bytes) -> dict[str, str]:
    found = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            key, value = line.split(b":", 1)
            found[key.strip().lower().decode()] = value.strip().decode()
    return found


def _read_body(src: BinaryIO, headers: dict[str, str], until_close: bool) -> bytes:
    """The raw body as sent (chunked bodies with their chunk lines and trailers)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            line = src.readline()
            parts.append(line)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = src.readline()
                    parts.append(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
            parts.append(src.read(size + 2))
    if "content-length" in headers:
        return src.read(int(headers["content-length"]))
    return src.read() if until_close else b""


class FaultProxy:
    """See the module docstring. ``rate``: fraction of requests given a fault; ``kinds``: the
    faults drawn from (uniformly); ``seed``: the random generator's seed."""

    def __init__(
        self,
        backend: str,
        rate: float,
        seed: int = 0,
        kinds: tuple[str, ...] = KINDS,
        delay_s: float = 0.3,
    ) -> None:
        host, port = backend.split("://", 1)[1].rsplit(":", 1)
        self.backend = (host, int(port))
        self.rate, self.kinds, self.delay_s = rate, kinds, delay_s
        self.rng = random.Random(seed)
        self.counts: Counter = Counter()
        self.requests = 0
        self.log: list[tuple[str, str, str | None]] = []
        """(method, target, fault or None) of every request, in arrival order."""
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def injected(self) -> int:
        return sum(self.counts.values())

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _draw(self, head: bytes) -> str | None:
        method, target = head.split(b" ", 2)[:2]
        with self._lock:
            self.requests += 1
            kind = self.rng.choice(self.kinds) if self.rng.random() < self.rate else None
            if kind is not None:
                self.counts[kind] += 1
            self.log.append((method.decode(), target.decode(), kind))
            return kind

    def _serve(self, client: socket.socket) -> None:
        backend: socket.socket | None = None
        answer: BinaryIO | None = None
        src = client.makefile("rb")
        try:
            while True:
                head = _read_head(src)
                if head is None:
                    return
                method = head.split(b" ", 1)[0].upper()
                asked = _headers(head)
                if asked.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # the body comes next
                    head = re.sub(rb"(?im)^expect:[^\r\n]*\r\n", b"", head)
                request = head + _read_body(src, asked, until_close=False)
                fault = self._draw(head)
                if fault == "reset":
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if fault == "slowdown":
                    client.sendall(
                        b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                        + f"Content-Length: {len(SLOW_DOWN)}\r\n\r\n".encode()
                        + SLOW_DOWN
                    )
                    continue
                if backend is None:
                    backend = socket.create_connection(self.backend)
                    answer = backend.makefile("rb")
                assert answer is not None
                backend.sendall(request)
                status = _read_head(answer)
                if status is None:
                    return
                code = int(status.split(b" ", 2)[1])
                no_body = method == b"HEAD" or code in (204, 304) or code < 200
                headers = _headers(status)
                body = b"" if no_body else _read_body(answer, headers, until_close=True)
                if fault == "drop":  # served, but the answer is lost
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if fault == "delay":
                    time.sleep(self.delay_s)
                client.sendall(status + body)
                framed = no_body or "content-length" in headers or "transfer-encoding" in headers
                if not framed or headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return
        finally:
            src.close()
            client.close()
            if backend is not None:
                backend.close()

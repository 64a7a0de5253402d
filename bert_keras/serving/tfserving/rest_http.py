"""The HTTP side of `bert-keras serve`'s REST API: connections held as TF Serving's evhttp holds them.

A listen backlog of `LISTEN_BACKLOG`, up to `max_connections` served at once (more wait in
the backlog), keep-alive, a request larger than `max_request_bytes` refused before its body
is read (HTTP 413), a request whose bytes stop coming dropped after `request_timeout`
seconds, and every refusal answered as JSON. A browser's requests (those with a
`Sec-Fetch-Mode` header) are answered with `Connection: close`. The page to try the models (`model_page`)
answers its own paths, which are not TF Serving's.
"""

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bert_keras.serving.tfserving.model_page import CONTENT_SECURITY_POLICY, page_reply

_READ_CHUNK = 1 << 20
LISTEN_BACKLOG = 1024  # evhttp listens with the system's maximum (SOMAXCONN, 4096 on Linux)


class RestHandler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection: each request's body read within the limits, answered by the `LocalModelServer`."""

    protocol_version = "HTTP/1.1"  # keep-alive, as TF Serving's evhttp server
    default_request_version = "HTTP/1.0"  # replies to unparsable request lines get a status line
    timeout = 60  # an idle keep-alive connection, or a silent client, is dropped after this

    def setup(self):
        super().setup()
        # One reply is written as headers then body: without this, Nagle's algorithm holds
        # the body for the client's delayed ACK, 40 ms a request on a keep-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_one_request(self):
        self.deadline = None  # set once the request line arrives
        super().handle_one_request()

    def parse_request(self):
        self.deadline = time.monotonic() + self.server.model_server.request_timeout
        parsed = super().parse_request()
        if parsed and "Sec-Fetch-Mode" in self.headers:
            # A browser (the page) keeps idle connections for minutes: each would hold
            # one of `max_connections` from every other client. Closed after each reply.
            self.close_connection = True
        return parsed

    def _reply(self, status, data, body=True, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if content_type.startswith("text/html"):
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (bad request line, headers, method) as JSON too."""
        self.close_connection = True
        text = message or self.responses.get(code, ("",))[0]
        self._reply(code, json.dumps({"error": text}).encode("utf-8"), body=self.command != "HEAD")

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"x", 16)
                if size == 0:
                    while self.rfile.readline(1024).strip():  # trailers
                        pass
                    return b"".join(chunks)
                total += size
                self._check_size(total)
                chunks.append(self._read_exactly(size))
                self.rfile.readline(1024)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        if not length.strip().isdigit():
            raise ValueError(f"invalid Content-Length: {length!r}")
        self._check_size(int(length))
        return self._read_exactly(int(length))

    def _discard_the_rest(self, seconds=2.0):
        """Reads and drops what the client still sends, for a while, before closing:
        closing with unread bytes resets the connection, and the client would lose
        the answer it has not read yet."""
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.2)
            stop = time.monotonic() + seconds
            while time.monotonic() < stop and self.connection.recv(_READ_CHUNK):
                pass
        except OSError:
            pass

    def _check_size(self, size):
        if size > self.server.model_server.max_request_bytes:
            raise RequestTooLarge(
                f"Request body of {size} bytes is larger than the server's limit "
                f"of {self.server.model_server.max_request_bytes} bytes (--max-request-bytes)"
            )

    def _read_exactly(self, size):
        chunks = []
        while size > 0:
            late = TimeoutError(
                f"the request body did not arrive within {self.server.model_server.request_timeout:g} s"
            )
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise late
            self.connection.settimeout(remaining)
            try:
                chunk = self.rfile.read1(min(size, _READ_CHUNK))
            except TimeoutError:
                raise late from None
            finally:
                self.connection.settimeout(self.timeout)
            if not chunk:
                raise ValueError("the request body ended before its Content-Length")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _handle(self, body=True):
        try:
            data = self._read_body()
        except RequestTooLarge as caught:  # answered unread; the connection cannot be reused
            self.close_connection = True
            self._reply(413, json.dumps({"error": str(caught)}).encode(), body)
            return self._discard_the_rest()
        except (ValueError, TimeoutError, OSError) as caught:
            self.close_connection = True
            return self._reply(400, json.dumps({"error": f"Bad request body: {caught}"}).encode(), body)
        page = page_reply(self.server.model_server, self.command, self.path)
        if page is not None:
            status, content_type, data = page
            return self._reply(status, data, body, content_type)
        self._reply(*self.server.model_server.rest(self.command, self.path, data), body=body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _handle

    def do_HEAD(self):
        self._handle(body=False)

    def log_message(self, *args):
        pass


class RequestTooLarge(ValueError):
    """A request body over `max_request_bytes`."""


class RestServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at once: the accept loop waits
    for a free slot, and connections beyond it wait in the listen backlog. `model_server`
    (a `LocalModelServer`) answers the requests and sets the limits."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address, model_server, max_connections):
        self.model_server = model_server
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, RestHandler)

    def process_request(self, request, client_address):
        self.slots.acquire()
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def handle_error(self, request, client_address):
        """A client that went away is no server error; anything else is reported as http.server reports it."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

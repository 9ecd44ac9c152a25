"""Small HTTP servers to put behind the real HAProxy: their health answers slow on demand."""

from __future__ import annotations

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Upstream(ThreadingHTTPServer):
    daemon_threads = True
    health_delay_s = 0.0
    drop_posts = False  # close a POST's connection unanswered, as an engine dying under it

    def handle_error(self, request, client_address):
        # HAProxy gives up on a health answer slower than its check's timeout and closes the
        # connection: the answer written after that fails, as the test means it to.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            time.sleep(self.server.health_delay_s)
        body = f"served by {self.server.server_port}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.server.drop_posts:
            self.close_connection = True
            return
        self.do_GET()

    def log_message(self, *args):
        pass

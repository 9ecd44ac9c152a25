"""The app's /metrics: every app worker's figures, added up, served by the supervisor.

Why here and in this way: a chat is pinned to one worker behind HAProxy, so a scrape through
the chat port would see one worker's figures at random. The workers write theirs to files in
one private folder instead (prometheus_client's multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``),
and the supervisor, which outlives them all, reads the folder at each scrape: one endpoint,
every worker, counters that survive a worker's restart. The folder is emptied when the
stack starts, since its files are one run's. A dead worker's gauges ("chats open") are dropped
at the next scrape (``mark_process_dead``): its chats went with it.

It listens on a port of its own, not the chat's, on loopback by default: the figures tell who
chats and when. An exposed one requires a bearer token (server/settings/monitoring.py).
"""

from __future__ import annotations

import hmac
import os
import re
import shutil
import socket
import threading
from pathlib import Path
from typing import Callable, Iterable, Optional
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, WSGIRequestHandler
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from server.settings import Settings
from server.stack import restart_control

DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# prometheus_client's file names: <type>[_<mode>]_<pid>.db
_PID = re.compile(r"_(\d+)\.db$")


def metrics_dir(settings: Settings) -> Path:
    """The workers' metric files: in the stack's run folder, so two stacks never share one."""
    return restart_control.run_folder(settings) / "app-metrics"


def prepare_dir(path: Path) -> Path:
    """An empty folder only this account reads: the last run's files would add to this one's."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=0o700, parents=True)
    return path


def pids_of(names: Iterable[str]) -> set[int]:
    return {int(m.group(1)) for name in names if (m := _PID.search(name))}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another account's process: alive
        return True
    return True


def drop_dead_workers(path: Path, alive: Callable[[int], bool] = pid_alive) -> None:
    """Forget the live gauges of workers that are gone (their counters stay: they happened)."""
    for pid in pids_of(p.name for p in path.glob("*.db")):
        if not alive(pid):
            mark_process_dead(pid, str(path))


def authorized(header: Optional[str], token: Optional[str]) -> bool:
    """No token set: everyone who reaches the (loopback) port; else only ``Bearer <token>``."""
    if token is None:
        return True
    return header is not None and hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


def wsgi_app(path: Path, token: Optional[str]):
    registry = CollectorRegistry()
    MultiProcessCollector(registry, str(path))
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        if not authorized(environ.get("HTTP_AUTHORIZATION"), token):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                ("WWW-Authenticate", "Bearer")])
            return [b"a bearer token is required (ERNIE_METRICS_TOKEN)\n"]
        drop_dead_workers(path)
        return metrics(environ, start_response)
    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # a line per scrape would fill the terminal
        pass


class MetricsEndpoint:
    """The HTTP server, in a thread of the supervisor."""

    def __init__(self, settings: Settings):
        self.path = prepare_dir(metrics_dir(settings))
        server_class = type("Server", (ThreadingWSGIServer,), {"address_family": (
            socket.AF_INET6 if ":" in settings.metrics_host else socket.AF_INET)})
        self.server = make_server(settings.metrics_host, settings.metrics_port,
                                  wsgi_app(self.path, settings.metrics_token_value),
                                  server_class, handler_class=_QuietHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True)
        self.thread.start()

    @property
    def worker_env(self) -> dict[str, str]:
        return {DIR_ENV: str(self.path)}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The app tier: one or more Chainlit workers, each a child of the supervisor.

Every worker runs the same ``app/chat.py`` with the supervisor's validated
settings and the URL of the engine tier (one engine, or the balancer in front of
the copies).  A chat lives in the memory of its worker, so the balancer pins each
browser to one worker (``server.stack.balancer``).  Workers share what must
outlive them: the saved chats (ERNIE_CHAT_DB: SQLite for one machine, PostgreSQL
for many workers or machines), the usage log, and the secret that signs logins.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Callable, Optional

import httpx

from server import tls_contexts, worker_drain
from server.progress import StatusLine
from server.settings import Settings, client_url
from server.stack.engine_tier import StartupFailed
from server.stack.processes import ManagedProcess
from server.stack.readiness import http_ok, wait_until
from server.stack.vllm_log import read_tail

APP_START_TIMEOUT_S = 120
# uvicorn compresses every websocket frame by default (permessage-deflate): for a
# stream of small token frames that is CPU for nothing on loopback and LAN.
APP_ENV = {"UVICORN_WS_PER_MESSAGE_DEFLATE": "false"}


def read_or_create_secret(path: Path) -> str:
    """A random secret kept in ``path`` (mode 0600): made once, never printed or logged."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


def auth_secret(path: Path) -> str:
    """Chainlit signs login tokens with this: made once per install, never in git or logs.

    Every worker must have the same one, or a login made on one worker would not
    be valid on the next.
    """
    return os.environ.get("CHAINLIT_AUTH_SECRET") or read_or_create_secret(path)


def worker_log_path(main_log: Path, index: int) -> Path:
    return main_log.with_name("app.log" if index == 0 else f"app-worker{index}.log")


class Worker:
    def __init__(self, index: int, port: int, proc: ManagedProcess, host: str, drain_token: str = ""):
        self.index, self.port, self.proc, self.host = index, port, proc, host
        self.drain_token = drain_token  # app/kept/drain.py: only the supervisor may drain it

    def drain(self, start: bool) -> dict:
        """Ask the worker to move its chats away (``start``) or only how far it got: its
        replies streaming and chats' sockets open (app/kept/drain.py)."""
        headers = {"Authorization": f"Bearer {self.drain_token}"}
        url = self.url + worker_drain.PATH
        answer = (httpx.post if start else httpx.get)(url, headers=headers, timeout=5,
                                                      verify=tls_contexts.shared())
        answer.raise_for_status()
        return answer.json()

    @property
    def url(self) -> str:
        return client_url(self.host, self.port)

    @property
    def label(self) -> str:
        return f"app {self.index}" if self.index else "app"


class AppTier:
    def __init__(self, settings: Settings, host: str, ports: tuple[int, ...], engine_url: str,
                 root: Path, log_path: Path, out: Callable[[str], None] = print,
                 extra_env: Optional[dict[str, str]] = None, engine_groups: bool = False):
        self.settings, self.root, self.out = settings, root, out
        self.engine_url = engine_url
        self.extra_env = extra_env or {}  # where the workers write their metrics
        # An engine that groups every request's tokens itself (an older vLLM's engine-wide
        # interval, server/plan/stream_interval.py) would only warn, once per request in its
        # log, at the app's per-request field: unless the user chose, the workers leave it out.
        self.engine_groups = engine_groups
        self.workers = []
        for index, port in enumerate(ports):
            # Chainlit's CLI without nest_asyncio, whose pure-Python loop costs CPU (app/serve.py).
            argv = [sys.executable, "-m", "app.serve", "run", str(root / "app" / "chat.py"),
                    "--headless", "--host", host, "--port", str(port)]
            proc = ManagedProcess("app", argv, worker_log_path(log_path, index), cwd=root)
            self.workers.append(Worker(index, port, proc, host, secrets.token_urlsafe(24)))
        self.reconfigure(settings)

    def reconfigure(self, settings: Settings) -> None:
        """The workers' environment from ``settings``: taken at each worker's next start."""
        self.settings = settings
        # The workers' engine_url is set, so they are told the keep-alive it implies here; with
        # ERNIE_MODELS (which refuses an engine URL) they find each engine from the settings.
        engine = {} if settings.models else {"ERNIE_ENGINE_URL": self.engine_url}
        env = {**settings.as_env(), **APP_ENV, **engine,
               "ERNIE_ENGINE_KEEPALIVE_S": str(settings.app_keepalive_s),
               "CHAINLIT_APP_ROOT": str(self.root), **self.extra_env,
               # Whose X-Forwarded-For uvicorn believes: this machine's (HAProxy, a local
               # proxy) and the trusted proxies'.
               "FORWARDED_ALLOW_IPS": ",".join(("127.0.0.1", "::1", *settings.proxies))}
        if self.engine_groups and settings.stream_interval_max is None:
            env["ERNIE_STREAM_INTERVAL_MAX"] = "1"
        if settings.users is not None:  # login, with or without saved chats
            env["CHAINLIT_AUTH_SECRET"] = auth_secret(self.root / ".cache" / "chainlit-auth-secret")
        for worker in self.workers:
            worker.proc.env = {**env, "ERNIE_WORKER_INDEX": str(worker.index),
                               worker_drain.TOKEN_ENV: worker.drain_token}

    def start_all(self) -> None:
        for worker in self.workers:
            worker.proc.start()
        for worker in self.workers:
            self.wait(worker)

    def start(self, worker: Worker) -> None:
        worker.proc.start()
        self.wait(worker)

    def wait(self, worker: Worker) -> None:
        status = StatusLine(worker.label)
        ok = wait_until(lambda: http_ok(worker.url), lambda: not worker.proc.alive(),
                        APP_START_TIMEOUT_S, status, lambda: "starting Chainlit")
        if not ok:
            status.done("Chainlit did not start")
            tail = "\n".join("    " + line for line in read_tail(worker.proc.log_path)[-10:])
            raise StartupFailed(f"The Chainlit app did not start; last lines of "
                                f"{worker.proc.log_path}:\n{tail}")
        status.done(f"Chainlit ready at {worker.url}")

    def stop(self) -> None:
        for worker in self.workers:
            if worker.proc.pid is not None:
                worker.proc.stop()

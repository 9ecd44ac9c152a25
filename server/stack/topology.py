"""How many processes of each tier this machine runs, and where each one listens (pure).

Three numbers decide the shape of the stack, each a setting with a default
chosen from the machine:

* API servers per engine copy (``--api-server-count``): the HTTP front end of
  vLLM.  One API server process is the limit of a 0.36 B model on an H200
  (direct load at 256 chats: 14.8k output tokens/s with one, 39k with four,
  docs/performance.md, "The app's CPU"), so a GPU machine gets a quarter of its
  cores, at most 4; several copies share three eighths of them.  A 2-core CPU
  machine gets 1: its engine already takes a core.
* Engine copies per GPU: separate ``vllm serve`` processes, each with its share
  of the GPU's memory, since one engine core process keeps an H200 busy only
  about a quarter of the time for this model.  vLLM's own data parallelism cannot
  put two copies on one GPU (it refuses duplicate devices), so copies on one GPU
  are separate servers behind the balancer.  Unset, ``up`` gives a small model on
  a GPU machine of 16 cores or more three (``server.plan.engine_copies``), else 1.
* App workers: Chainlit processes.  One streams about 10k tokens/s at one core;
  on the H200 (16 cores) 8 workers carried 1,000 chat users within the objective
  where 4 carried 500 (docs/performance.md, "Chat users within the objective"), so a GPU machine gets half its cores, at
  most 8; a CPU machine 1.

With one copy (or one worker) nothing changes from the plain stack: it listens
where the settings say.  With several, each listens on a loopback port of its
own and HAProxy listens where the settings say (``server.stack.balancer``).
A tier exposed to other machines (its host not loopback) always sits behind
HAProxy, even as one process: neither vLLM nor uvicorn limits how long a client
may take to send its headers or how many connections one address holds, and
vLLM's key guards only its /v1 paths.  So does a chat on HTTPS: HAProxy terminates TLS.
With several models (ERNIE_MODELS) on an exposed host, each model's vLLM listens on a
loopback port of its own and HAProxy takes the model's port, one guarded frontend each.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable, Optional

from server import settings as config
from server.settings import Settings
from server.stack.balancer import Backend, BalancerConfig, Frontend
from server.stack.engine_args import EngineCopy

LOOPBACK = "127.0.0.1"
MAX_AUTO_API_SERVERS = 4
MAX_AUTO_APP_WORKERS = 8


def auto_api_servers(device: str, cores: int, copies: int = 1) -> int:
    """Per engine copy: a quarter of the cores for one copy, at most 4; several copies share
    three eighths of them (3 copies x 2 on 16 cores, docs/performance.md, "3,000 users on one
    H100": 3 each were no better)."""
    if device == "cpu":
        return 1
    return max(1, min(MAX_AUTO_API_SERVERS, cores // 4, cores * 3 // 8 // copies))


def auto_app_workers(device: str, cores: int) -> int:
    return 1 if device == "cpu" else max(1, min(MAX_AUTO_APP_WORKERS, cores // 2))


@dataclass(frozen=True)
class ModelEngine:
    """One model of ERNIE_MODELS: the port its clients reach, and its vLLM."""

    served_name: str
    port: int
    copy: EngineCopy


@dataclass(frozen=True)
class Topology:
    """The processes of one ``up``: engine copies, app workers, and whether a balancer fronts them."""

    device: str
    api_servers: int
    copies: tuple[EngineCopy, ...]
    worker_ports: tuple[int, ...]
    app_host: str
    app_port: int
    engine_host: str
    engine_port: int
    engine_exposed: bool = False
    app_exposed: bool = False
    chat_tls: bool = False
    models: tuple[ModelEngine, ...] = ()   # ERNIE_MODELS's, in their order; () without

    @property
    def model_copies(self) -> dict[str, EngineCopy]:
        """Each model's vLLM, by served name."""
        return {model.served_name: model.copy for model in self.models}

    @property
    def balanced_engine(self) -> bool:
        return len(self.copies) > 1 or self.engine_exposed

    @property
    def balanced_app(self) -> bool:
        behind = self.app_exposed or self.chat_tls
        return len(self.worker_ports) > 1 or (behind and bool(self.worker_ports))

    @property
    def needs_balancer(self) -> bool:
        return self.balanced_engine or self.balanced_app

    @property
    def worker_host(self) -> str:
        return LOOPBACK if self.balanced_app else self.app_host

    def describe(self) -> str:
        if not self.worker_ports:
            return (f"{len(self.copies)} server(s) of engine copies only (headless), for the head "
                    "at ERNIE_DATA_PARALLEL_ADDRESS")
        engines = (f"{len(self.models)} model engines" if self.models else
                   f"{len(self.copies)} engine cop{'y' if len(self.copies) == 1 else 'ies'}")
        parts = [f"{engines} x {self.api_servers} API server{'s' if self.api_servers > 1 else ''}",
                 f"{len(self.worker_ports)} app worker{'s' if len(self.worker_ports) > 1 else ''}"]
        if self.needs_balancer:
            parts.append("HAProxy in front of " + " and ".join(
                t for t, on in (("the model engines" if self.models else "the engine copies",
                                 self.balanced_engine),
                                ("the app workers", self.balanced_app)) if on))
        return ", ".join(parts)


def model_engines(settings: Settings, api_servers: int, exposed: bool,
                  free_port: Callable[[], int]) -> tuple[ModelEngine, ...]:
    """Each model's vLLM where the settings say, or on a loopback port when HAProxy takes the
    model's port."""
    return tuple(ModelEngine(m.served_name, m.port,
                             EngineCopy(LOOPBACK, free_port(), api_servers) if exposed
                             else EngineCopy(m.host, m.port, api_servers))
                 for m in settings.served_models) if settings.models else ()


def plan_topology(settings: Settings, device: str, cores: int,
                  free_port: Callable[[], int]) -> Topology:
    """The topology the settings ask for on a machine with ``cores`` cores."""
    copies_n = settings.copies_per_gpu
    api_servers = settings.api_servers or auto_api_servers(device, cores, copies_n)
    engine_exposed, app_exposed = config.engine_exposed(settings), config.app_exposed(settings)
    models = model_engines(settings, api_servers, engine_exposed, free_port)
    if models:  # one copy each (ERNIE_ENGINE_COPIES=1); the first is the engine's
        copies = (models[0].copy,)
    elif copies_n == 1 and not engine_exposed:
        copies = (EngineCopy.only(settings, api_servers),)
    else:
        copies = tuple(EngineCopy(LOOPBACK, free_port(), api_servers, i, copies_n)
                       for i in range(copies_n))
    # A node of engine copies only (vllm serve --headless) runs no chat.
    workers_n = 0 if settings.node_role == "engines" else (
        settings.app_workers or auto_app_workers(device, cores))
    # HAProxy terminates TLS, so a chat on HTTPS is behind it even as one worker.
    worker_ports = ((settings.app_port,) if workers_n == 1 and not (app_exposed or settings.chat_tls)
                    else tuple(free_port() for _ in range(workers_n)))
    return Topology(device, api_servers, copies, worker_ports, settings.app_host,
                    settings.app_port, settings.engine_host, settings.engine_port,
                    engine_exposed, app_exposed, settings.chat_tls, models)


def balancer_config(topology: Topology, settings: Settings, max_connections: int = 20000,
                    tls_pem: Optional[str] = None) -> Optional[BalancerConfig]:
    """HAProxy's frontends for the tiers behind it; None when neither is. ``tls_pem``: the
    chat's certificate and key (server/stack/tls.py), when it serves HTTPS."""
    frontends = []
    limit = settings.connections_per_client
    if topology.balanced_app:
        frontends.append(Frontend("chat", topology.app_host, topology.app_port,
                                  tuple(Backend(LOOPBACK, p) for p in topology.worker_ports),
                                  health_path="/", sticky=True,
                                  per_client=limit if topology.app_exposed else 0,
                                  trusted=settings.proxies, forwarders=settings.proxies,
                                  tls_pem=tls_pem))
    if topology.balanced_engine:
        frontends += engine_frontends(topology, limit)
    return (BalancerConfig(tuple(frontends), max_connections, settings.engine_keepalive_limit_s)
            if frontends else None)


def engine_frontends(topology: Topology, limit: int) -> list[Frontend]:
    """The engine's frontend, or with ERNIE_MODELS one per model on the model's port."""
    # The app's own connections come from this machine, one per streaming chat: a
    # crowd's worth. Loopback reaches the copies directly anyway, so the limit spares it.
    exposed, host = topology.engine_exposed, topology.engine_host
    trusted = ("127.0.0.0/8", "::1", *own_address(host))
    fronts = ([(frontend_name(i, m.served_name), m.port, (m.copy,)) for i, m in enumerate(topology.models)]
              or [("engine", topology.engine_port, topology.copies)])
    return [Frontend(name, host, port, tuple(Backend(c.host, c.port) for c in copies),
                     health_path="/health", keyed=exposed, per_client=limit if exposed else 0,
                     trusted=trusted, replay=True)
            for name, port, copies in fronts]


def own_address(host: str) -> tuple[str, ...]:
    """The engine's address when it is one, not a wildcard or a name: the app reaches the engine
    there, so its crowd of connections comes from that address, which no other machine's can
    (a handshake from a forged source never completes)."""
    try:
        return () if ipaddress.ip_address(host).is_unspecified else (host,)
    except ValueError:
        return ()


def frontend_name(index: int, served_name: str) -> str:
    """HAProxy's name of a model's frontend: ``engine`` for the first (as the single engine's),
    then ``engine_<n>_<served name>``; the index keeps two names that sanitize alike apart."""
    return "engine" if index == 0 else f"engine_{index}_{re.sub(r'[^a-z0-9_-]', '-', served_name.lower())[:40]}"

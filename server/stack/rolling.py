"""`ernie-chat restart`: new settings, one engine copy and one app worker at a time.

Each step takes one process out of HAProxy's rotation, waits (at most
ERNIE_DRAIN_TIMEOUT_S) until what it serves has ended, stops it, starts it with
the new settings, waits until it serves, and puts it back:

* an engine copy is drained (``state drain``): no new request reaches it, and it
  is stopped once HAProxy counts no stream on it;
* an app worker is put in maintenance (``state maint``: even browsers pinned to it
  go elsewhere) and asked to move its chats (app/kept/drain.py): each chat's socket
  closes once its reply ends, its browser reconnects to another worker, and the
  worker is stopped once it streams nothing and holds no socket.

The watch loop leaves a process alone while a step holds it (``Holds.hold``), so
the deliberate stop is no crash.  Zero downtime needs somewhere for the load to
go: at least two engine copies and two app workers behind HAProxy.  With one of
either, the restart is refused with what to do instead.

Settings that shape the stack as a whole (ports, the number of processes, the
model, the memory plan, the saved chats' database) cannot change one process at
a time: ``refusals`` names them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from pydantic import SecretStr

from server.errors import ErnieChatError
from server.settings import Settings, env_name

RESTART = "stop `ernie-chat up` and start it again"

# What cannot change by restarting one process at a time, and why.
FIXED: dict[str, str] = {
    **dict.fromkeys(("engine_host", "engine_port", "app_host", "app_port"),
                    "HAProxy and the clients hold these addresses"),
    **dict.fromkeys(("engine_copies", "app_workers", "api_servers"),
                    "the number of processes and HAProxy's servers are planned at start"),
    **dict.fromkeys(("node_role", "data_parallel_size", "data_parallel_size_local",
                     "data_parallel_address", "data_parallel_rpc_port", "data_parallel_start_rank",
                     "tensor_parallel_size"),
                    "the engine's machines and GPUs are joined at start"),
    **dict.fromkeys(("model", "served_model_name", "demo_model_dir", "max_model_len"),
                    "copies of the old and the new would answer side by side meanwhile"),
    **dict.fromkeys(("device", "engine_venv", "torch_index_url"),
                    "the engine's environment is set up at start"),
    **dict.fromkeys(("metrics_host", "metrics_port", "metrics_token"),
                    "the supervisor serves the app's metrics from start (docs/monitoring.md)"),
    **dict.fromkeys(("gpu_memory_utilization", "kv_cache_gib"),
                    "the copies share the device's memory by a plan made at start"),
    **dict.fromkeys(("chat_db", "auth_db", "live_chats_dir"),
                    "the workers would save to two places meanwhile"),
    **dict.fromkeys(("engine_url", "api_key", "connections_per_client", "engine_keepalive_s"),
                    "HAProxy and every worker must agree on it at once"),
    "log_file": "the run folder is where `restart` finds the running stack",
}


class RestartRefused(ErnieChatError):
    """`ernie-chat restart` cannot do what was asked without downtime."""


@dataclass(frozen=True)
class Step:
    tier: str   # "engine" or "chat": HAProxy's frontend, as balancer.render_haproxy names it
    index: int  # the copy or worker: its server's number in that backend
    label: str  # as the supervisor's lines name the process


def plain(value):
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def changed(old: Settings, new: Settings) -> list[str]:
    """The fields whose values differ (secrets compared by value, never shown)."""
    return [name for name in type(old).model_fields
            if plain(getattr(old, name)) != plain(getattr(new, name))]


def refusals(names: list[str]) -> list[str]:
    return [f"{env_name(name)}: {FIXED[name]}" for name in names if name in FIXED]


def check(old: Settings, new: Settings, copies: int, balanced_engine: bool, workers: int,
          balanced_app: bool, starts_engine: bool) -> list[str]:
    """The settings that change (none fixed) and a room for every process to drain to;
    raises RestartRefused with what to do instead."""
    problems = []
    if starts_engine and (copies < 2 or not balanced_engine):
        problems.append("restart without downtime needs ERNIE_ENGINE_COPIES>=2: with one engine "
                        f"copy nothing answers while it restarts. To apply new settings anyway, {RESTART}.")
    if workers < 2 or not balanced_app:
        problems.append("restart without downtime needs ERNIE_APP_WORKERS>=2: with one app "
                        f"worker no other takes its chats while it restarts. To apply new settings "
                        f"anyway, {RESTART}.")
    names = changed(old, new)
    if fixed := refusals(names):
        problems.append("these settings cannot change one process at a time; set them back, or "
                        f"{RESTART}:\n      " + "\n      ".join(fixed))
    if problems:
        raise RestartRefused("Not restarted:\n  - " + "\n  - ".join(problems))
    return names


def plan(copies: list[str], workers: list[str]) -> list[Step]:
    """Every engine copy first, then every worker: the workers' new settings then meet
    engine copies that run theirs already."""
    return ([Step("engine", i, label) for i, label in enumerate(copies)]
            + [Step("chat", i, label) for i, label in enumerate(workers)])


def wait_for(condition: Callable[[], bool], timeout_s: float, every_s: float = 0.2) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def wait_drained(count: Callable[[], int], timeout_s: float, say: Callable[[str], None],
                 label: str, every_s: float = 0.5) -> bool:
    """Poll ``count`` (what still runs) until 0 or ``timeout_s``; say what is left now and then."""
    deadline = time.monotonic() + timeout_s
    last: Optional[int] = None
    while True:
        left = count()
        if left == 0:
            return True
        if time.monotonic() >= deadline:
            say(f"[restart] {label}: {left} still running after {timeout_s:.0f} s "
                "(ERNIE_DRAIN_TIMEOUT_S); stopping it anyway")
            return False
        if left != last:
            say(f"[restart] {label}: waiting for {left} to end")
            last = left
        time.sleep(every_s)

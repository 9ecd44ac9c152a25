"""Run the whole stack and keep it up: the engine tier, the balancer, the app tier.

Start-up order matters: the app is only useful once the engine answers, so the
engine copies are waited for first (``engine_tier``: each until ``/health`` and
``/v1/models`` answer; with ERNIE_MODELS one tier per model, ``model_tiers``).
What does not need the engine starts meanwhile: the Chainlit workers
(``app_tier``) and, when a tier has several processes, HAProxy (``balancer``).
Then the engine is warmed up with requests like the app's
(``warmup``) while the workers finish loading, and the chat URL is printed
last.  After that the watch loop (``watch_loop``) restarts whichever child dies,
until one cannot be kept up.  SIGHUP (`ernie-chat restart`) restarts the processes
one at a time with new settings (``roller``), while the loop leaves the one being
restarted alone.  Ctrl-C or SIGTERM stops every process group.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from pydantic import SecretStr

from server import chat_db, oidc_discovery
from server.errors import ErnieChatError
from server.paths import GENERATED_ENGINE_KEY, ROOT
from server.plan import engine_copies
from server.plan.device import resolve_device
from server.private_files import tighten
from server.progress import StatusLine, run_step
from server.settings import Settings, engine_exposed
from server.stack import balancer, balancer_runtime, model_tiers, on_demand, restart_control, tls, warmup, watch_loop
from server.stack.app_tier import AppTier, read_or_create_secret
from server.stack.engine_tier import EngineInfo, EngineTier, StartupFailed
from server.stack.metrics_endpoint import MetricsEndpoint
from server.stack.processes import ManagedProcess, free_port, port_free, port_problem
from server.stack.readiness import http_ok, wait_until
from server.stack.running import Holds, Restart
from server.stack.topology import Topology, balancer_config, plan_topology


class Shutdown(Exception):
    """Raised in the main thread by SIGTERM, like KeyboardInterrupt is by SIGINT."""


class Stack:
    """The processes of one ``up``; the watch loop, the restart and the models started on demand
    get it as a ``RunningStack`` (server/stack/running.py)."""

    def __init__(self, settings: Settings, root: Path = ROOT, out: Callable[[str], None] = print):
        self.settings, self.root, self.out = settings, root, out
        self.topology: Optional[Topology] = None
        self.engines: Optional[EngineTier] = None  # ERNIE_MODEL's, or the first model's
        self.tiers: list[EngineTier] = []           # one per model of ERNIE_MODELS
        self.apps: Optional[AppTier] = None
        self.metrics: Optional[MetricsEndpoint] = None
        self.balancer: Optional[ManagedProcess] = None
        self.info: Optional[EngineInfo] = None
        self.certificate: Optional[tls.ChatCertificate] = None
        self.holds = Holds()  # the processes the watch loop leaves alone now
        self.restart_asked = threading.Event()
        self.rolling: Optional[threading.Thread] = None  # roller.serve, once the first comes
        self.restarts: queue.Queue[Restart] = queue.Queue()
        self.rolling_now = threading.Event()
        self.on_demand: Optional[on_demand.OnDemand] = None  # ERNIE_MODELS_AT_ONCE, ERNIE_MODEL_IDLE_S

    @property
    def log_path(self) -> Path:
        log = self.settings.log_file
        return log if log.is_absolute() else self.root / log

    # --- before anything starts ------------------------------------------------
    def secure_exposed_engine(self) -> None:
        """vLLM on a non-loopback address must require a key: make one if none is set."""
        s = self.settings
        if not engine_exposed(s) or s.api_key is not None:
            return
        path = self.root / GENERATED_ENGINE_KEY
        key = read_or_create_secret(path)
        self.settings = s.model_copy(update={"api_key": SecretStr(key)})
        self.out(f"[security] vLLM listens on {s.engine_host}, so it requires an API key. None was "
                 f"set (ERNIE_API_KEY); one was generated and saved in {path} (readable by you "
                 "only). Clients must send it as 'Authorization: Bearer <key>' on every path but "
                 "GET /health; the chat app does.")

    def make_runtime_files_private(self) -> None:
        """What an earlier version left readable by every account (server/private_files.py);
        the logs and the saved chats are tightened where they are opened."""
        usage = self.settings.usage_log
        tighten(Path(".env"), self.root / ".files", usage if usage.is_absolute() else self.root / usage)

    def prepare_tls(self) -> None:
        """The chat's certificate, checked or made, before anything starts (server/stack/tls.py)."""
        self.certificate = tls.prepare(self.settings, self.root / ".cache" / "tls")

    def warn_exposed_chat(self) -> None:
        """Passwords and cookies in clear text on a network deserve more than a quiet default;
        a certificate nobody trusts yet needs saying how to trust or replace it."""
        if notice := tls.notice(self.settings, self.certificate):
            self.out(notice)

    def plan(self) -> Topology:
        s, cores = self.settings, os.cpu_count() or 1
        device = resolve_device(s)
        if engine_copies.chooses_copies(s) and device == "cuda":
            choice = engine_copies.choose(s, device, cores)
            self.settings = s = s.model_copy(update={"engine_copies": choice.copies})
            self.out(f"[stack] {choice.reason}")
        self.topology = plan_topology(s, device, cores, free_port)
        return self.topology

    def check_before_start(self) -> None:
        """Ports, the balancer, the saved chats and the sign-in provider: problems found in milliseconds, not after vLLM."""
        s, topology = self.settings, self.topology or self.plan()
        wanted = [(s.app_host, s.app_port, "ERNIE_APP_PORT")] if topology.worker_ports else []
        if topology.worker_ports and s.metrics_port:
            wanted.append((s.metrics_host, s.metrics_port, "ERNIE_METRICS_PORT"))
        if s.starts_engine and s.node_role == "head":
            wanted[:0] = [(model.host, model.port, "ERNIE_ENGINE_PORT" if i == 0 else
                           f"ERNIE_ENGINE_PORT+{i} (model {model.served_name} of ERNIE_MODELS)")
                          for i, model in enumerate(s.served_models)]
        problems = [p for p in (port_problem(*w) for w in wanted) if p]
        if topology.needs_balancer:
            try:
                balancer.ensure_haproxy()
            except balancer.BalancerMissing as exc:
                problems.append(str(exc))
        for check, value in ((chat_db.prepare_db, s.chat_db), (oidc_discovery.discover, s.oidc_issuer)):
            try:
                if value is not None:
                    check(value)
            except (chat_db.ChatDbError, oidc_discovery.OidcError) as exc:
                problems.append(str(exc))
        if problems:
            raise StartupFailed("\n".join(problems))

    # --- the tiers -------------------------------------------------------------
    def start_engine(self, while_it_loads: Optional[Callable[[], None]] = None) -> EngineInfo:
        """Start the engine copies and wait until they serve; ``while_it_loads`` runs first
        thing after the set-up, so that what does not need the engine starts meanwhile."""
        topology = self.topology or self.plan()
        if self.settings.models:
            self.tiers = model_tiers.make_tiers(self.settings, topology.device, topology.model_copies,
                                                self.root, self.log_path, self.out)
            model_tiers.prepare(self.settings, self.tiers, topology.device, self.out)
            self.on_demand = model_tiers.on_demand_models(self)
        else:
            copies = topology.copies if self.settings.starts_engine else ()
            self.tiers = [EngineTier(self.settings, copies, topology.device, self.root,
                                     self.log_path, self.out)]
            self.tiers[0].prepare()
        self.engines = self.tiers[0]
        if while_it_loads:
            while_it_loads()
        for tier in self.tiers:  # one after another: module docstring of model_tiers
            if not (self.on_demand and tier.model in self.on_demand.asleep):  # else on demand
                tier.start_all()
                tier.report()
        self.info = self.engines.info
        return self.info

    def engines_group(self) -> bool:
        """Whether the engines `up` starts send every request's tokens in groups of their own
        (the tiers chose an engine-wide interval for an older vLLM)."""
        return any(t.interval_choice and t.interval_choice.interval for t in self.tiers)

    def launch_balancer(self) -> None:
        """HAProxy's process, started without waiting: it needs only the topology, so it
        starts while the engine loads and is listening long before the engine serves."""
        config = balancer_config(self.topology, self.settings,
                                 balancer.max_connections(balancer.open_files_limit()),
                                 str(self.certificate.pem) if self.certificate else None)
        if config is None:
            return
        if len(bytes(self.stats_socket)) < balancer_runtime.MAX_SOCKET_PATH:
            config = dataclasses.replace(config, stats_socket=str(self.stats_socket))
        else:
            self.out(f"[balancer] no admin socket: {self.stats_socket} is longer than a UNIX "
                     "socket's path may be, so `ernie-chat restart` cannot drain; choose a "
                     "shorter ERNIE_LOG_FILE folder for it")
        self.balancer = balancer.managed_haproxy(config, self.root / ".cache" / "haproxy.cfg",
                                                 self.log_path.with_name("balancer.log"), self.root,
                                                 self.settings.api_key_value)
        self.balancer.start()

    def start_balancer(self) -> None:
        if self.balancer is None:
            self.launch_balancer()
        if self.balancer is not None:
            self.wait_for_balancer()

    def restart_balancer(self) -> None:
        self.balancer.start()
        self.wait_for_balancer()

    def wait_for_balancer(self) -> None:
        status = StatusLine("balancer")
        listening = wait_until(lambda: not port_free(*self.balancer_address()),
                               lambda: not self.balancer.alive(), 10, status, lambda: "starting HAProxy")
        if not listening:
            status.done("HAProxy did not start")
            raise StartupFailed(f"HAProxy did not start; see {self.balancer.log_path}")
        t = self.topology
        tiers = [f"chat at {t.app_host}:{t.app_port}"] if t.balanced_app else []
        if t.balanced_engine:
            tiers += ([f"engine {m.served_name} at {t.engine_host}:{m.port}" for m in t.models]
                      or [f"engine at {t.engine_host}:{t.engine_port}"])
        status.done("HAProxy listening: " + ", ".join(tiers))

    @property
    def stats_socket(self) -> Path:
        return self.log_path.with_name("haproxy.sock")

    def balancer_address(self) -> tuple[str, int]:
        t = self.topology
        return (t.app_host, t.app_port) if t.balanced_app else (t.engine_host, t.engine_port)

    def launch_app(self) -> None:
        """The Chainlit workers' processes, started without waiting: they need the engine
        only when the first chat opens, so they load while it does."""
        topology = self.topology or self.plan()
        self.index_search()
        self.metrics = MetricsEndpoint(self.settings) if self.settings.metrics_port else None
        self.apps = AppTier(self.settings, topology.worker_host, topology.worker_ports,
                            self.settings.engine_base_url, self.root, self.log_path, self.out,
                            self.metrics.worker_env if self.metrics else None,
                            engine_groups=self.engines_group())
        for worker in self.apps.workers:
            worker.proc.start()

    def index_search(self) -> None:
        """A saved-chats database from before the search's index gets it here, before any
        worker starts: its progress on the terminal, and no worker's start-up timeout on it
        (app/kept/search_index.py)."""
        if self.settings.chat_db is None:
            return
        chat_db.prepare_db(self.settings.chat_db)  # the tables, as the workers will find them
        if chat_db.search_index_to_build(self.settings.chat_db):
            run_step([sys.executable, "-m", "app.kept.search_index", str(self.settings.chat_db)],
                     "search index", self.log_path.with_name("search-index.log"), cwd=self.root,
                     done_message="ready")

    def launch_front(self) -> None:
        self.launch_app()
        self.launch_balancer()

    def start_app(self) -> None:
        if self.apps is None:
            self.launch_app()
        if warmup.wanted(self.settings) and self.engines:
            # The workers start meanwhile: the warm-up costs the user no time of its own.
            for tier in self.tiers:
                if tier.running():  # not an asleep one: its wake warms it (server/stack/on_demand.py)
                    warmup.warm_tier(tier, self.out)
        for worker in self.apps.workers:
            self.apps.wait(worker)
        if self.topology.balanced_app and not wait_until(
                lambda: http_ok(self.settings.app_url, verify=False), lambda: False, 10,
                StatusLine("balancer"), lambda: "waiting for its first healthy worker"):
            raise StartupFailed(f"{self.settings.app_url} does not answer through HAProxy")

    def start(self) -> None:
        """Everything, in order; then one line that says where the start-up time went."""
        took = {}
        mark = time.monotonic()

        def lap(name: str) -> None:
            nonlocal mark
            took[name], mark = time.monotonic() - mark, time.monotonic()
        self.make_runtime_files_private()
        self.secure_exposed_engine()
        self.prepare_tls()
        self.warn_exposed_chat()
        self.out(f"[stack] {self.plan().describe()}")
        self.check_before_start()
        lap("checks")
        if self.settings.starts_engine:
            self.start_engine(while_it_loads=self.launch_front)
            lap(f"engine ({'the app and HAProxy' if self.balancer else 'the app'} loading meanwhile)")
        else:
            self.out(f"[engine] using the server at {self.settings.engine_url} (not started here)")
        self.start_balancer()
        lap("balancer")
        self.start_app()
        lap("app and warm-up")
        if self.on_demand:  # from now on a model is idle when no chat uses it
            self.on_demand.begin()
        self.out(f"[start-up] {sum(took.values()):.0f} s: " + ", ".join(
            f"{name} {seconds:.1f} s" for name, seconds in took.items() if seconds >= 0.05))

    def stop(self) -> None:
        if self.on_demand:  # no model wakes any more; one waking stops below
            self.on_demand.end()
        # The front first, so no new request reaches a tier that is going away.
        if self.apps:
            self.apps.stop()
        if self.metrics:
            self.metrics.stop()
        if self.balancer and self.balancer.pid is not None:
            self.balancer.stop()
        for tier in self.tiers:
            tier.stop()
        if self.on_demand:  # a start it was in fails once its process is stopped
            self.on_demand.join()
            for tier in self.tiers:
                tier.stop()
        for tier in self.tiers:
            tier.state("stopped")


def raise_shutdown(signum, frame) -> None:
    """A SIGTERM handler: SIGTERM then unwinds like Ctrl-C, through every ``finally``."""
    raise Shutdown(signal.Signals(signum).name)


def run(settings: Settings, out=print) -> int:
    """``ernie-chat up``: returns the process exit code."""
    signal.signal(signal.SIGTERM, raise_shutdown)
    stack = Stack(settings, out=out)
    folder = restart_control.run_folder(settings)
    restart_control.announce(folder)
    # Taken up by the watch loop, once everything runs (SIGHUP's default would end `up`).
    signal.signal(restart_control.SIGNAL, lambda *_: stack.restart_asked.set())
    try:
        stack.start()
        if settings.node_role == "engines":
            out(f"Engines: {settings.data_parallel_size_local} cop(ies) of this machine serve the head "
                f"at {settings.data_parallel_address}:{settings.data_parallel_rpc_port} (ranks from "
                f"{settings.data_parallel_start_rank})")
        else:
            out(f"Chat:   {settings.app_url}")
            for model in settings.served_models:
                asleep = stack.on_demand and model.served_name in stack.on_demand.asleep
                out(f"Engine: {model.base_url}" + (f" serves {model.served_name}" if settings.models else "")
                    + (" (on demand)" if asleep else "")
                    + (f" (HAProxy on {balancer.bind_address(model.host, model.port)}: the API key on "
                       "every path but GET /health)" if engine_exposed(settings) else ""))
        if stack.info and stack.info.is_demo:
            out("Serving the built-in DEMO model (word salad by design); set ERNIE_MODEL for a real one.")
        out("Press Ctrl-C to stop.")
        out(f"ERROR: {watch_loop.keep_up(stack)}")
        return 1
    except (KeyboardInterrupt, Shutdown):
        out("\nStopping ...")
        return 0
    except ErnieChatError as exc:
        out(exc.render())
        return 1
    finally:
        # A second Ctrl-C must not interrupt the cleanup that stops vLLM.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(restart_control.SIGNAL, signal.SIG_IGN)
        stack.stop()
        restart_control.withdraw(folder)
        out("Stopped.")

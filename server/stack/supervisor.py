"""Run the whole stack: vLLM's OpenAI server, then the Chainlit app, and keep both up.

Start-up order matters: the app is only useful once the engine answers, so we
wait for ``/health`` *and* ``/v1/models`` (health turns 200 a moment before the
model is listed).  After that the loop restarts whichever process dies, with a
capped exponential backoff, and gives up with the doctor's diagnosis when the
engine keeps failing.  Ctrl-C or SIGTERM stops both process groups.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import httpx
from pydantic import SecretStr

from server import chat_db
from server.engine_state import write_state
from server.errors import ErnieChatError
from server.plan import kv_planner as kp
from server.plan import preflight
from server.plan.device import read_memory, resolve_device
from server.plan.model_config import load_shape
from server.progress import StatusLine
from server.settings import Settings, auth_headers
from server.stack import doctor, provision
from server.stack.engine_args import engine_command
from server.stack.model_source import choose_model
from server.stack.processes import ManagedProcess, port_problem
from server.stack.vllm_log import parse_kv_report, read_tail

ROOT = provision.ROOT
BACKOFF_CAP_S = 30.0
# A process that stayed up this long is healthy again: its restart count resets.
STABLE_AFTER_S = 120.0
# A live engine that fails every /health probe this long is hung (e.g. SIGSTOP, a
# deadlocked GPU): probing every 5 s with a 3 s timeout.
HEALTH_EVERY_S, HEALTH_TIMEOUT_S, HUNG_AFTER_S = 5.0, 3.0, 15.0
CPU_ENGINE_NICE = 10


class Shutdown(Exception):
    """Raised in the main thread by SIGTERM, like KeyboardInterrupt is by SIGINT."""


class StartupFailed(ErnieChatError, RuntimeError):
    """The stack could not start; the message carries the diagnosis."""


def backoff_delay(attempt: int, base_s: float = 1.0, cap_s: float = BACKOFF_CAP_S) -> float:
    """1, 2, 4, 8 ... seconds, never more than ``cap_s``."""
    return min(cap_s, base_s * 2 ** max(0, attempt - 1))


def probe_engine(base_url: str, api_key: Optional[str], timeout_s: float = 2.0) -> Optional[dict]:
    """The first entry of /v1/models once the engine is healthy and serving, else None."""
    try:
        with httpx.Client(timeout=timeout_s) as client:
            if client.get(f"{base_url}/health").status_code != 200:
                return None
            models = client.get(f"{base_url}/v1/models", headers=auth_headers(api_key))
            if models.status_code != 200:
                return None
            data = models.json().get("data") or []
            return data[0] if data else None
    except (httpx.HTTPError, ValueError):
        return None


def wait_until(check: Callable[[], object], is_dead: Callable[[], bool], timeout_s: float,
               status: StatusLine, detail: Callable[[], str]) -> object:
    """Poll ``check`` until it returns something truthy, the process dies, or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if is_dead():
            return None
        status.update(detail())
        time.sleep(1.0)
    return None


def _last_log_line(path: Path) -> str:
    lines = read_tail(path, 20_000)
    return lines[-1][-120:] if lines else ""


@dataclass
class EngineInfo:
    model: str
    is_demo: bool
    max_model_len: int


class Stack:
    """The engine and app processes of one ``up``."""

    def __init__(self, settings: Settings, root: Path = ROOT, out=print):
        self.settings, self.root, self.out = settings, root, out
        self.engine: Optional[ManagedProcess] = None
        self.app: Optional[ManagedProcess] = None
        self.info: Optional[EngineInfo] = None
        self._model_is_demo = False
        self._last_probe = 0.0
        self._unhealthy_since: Optional[float] = None
        self.plan: Optional[kp.Plan] = None

    @property
    def log_path(self) -> Path:
        log = self.settings.log_file
        return log if log.is_absolute() else self.root / log

    @property
    def app_log_path(self) -> Path:
        return self.log_path.with_name("app.log")

    # --- checks before anything starts ------------------------------------
    def check_before_start(self) -> None:
        """Ports and the saved-chats file: problems found in milliseconds, not after vLLM."""
        s = self.settings
        wanted = [(s.app_host, s.app_port, "ERNIE_APP_PORT")]
        if s.starts_engine:
            wanted.insert(0, (s.engine_host, s.engine_port, "ERNIE_ENGINE_PORT"))
        problems = [p for p in (port_problem(*w) for w in wanted) if p]
        if s.chat_db is not None:
            try:
                chat_db.prepare_db(s.chat_db)
            except chat_db.ChatDbError as exc:
                problems.append(str(exc))
        if problems:
            raise StartupFailed("\n".join(problems))

    # --- the engine --------------------------------------------------------
    def prepare_engine(self) -> ManagedProcess:
        s = self.settings
        device = resolve_device(s)
        python = provision.ensure_engine_env(s.engine_venv, device, self.root)
        choice = choose_model(s, root=self.root)
        self.out(f"[model] {choice.reason}" if choice.is_demo else f"[model] serving {choice.reason}")
        if choice.is_demo:
            provision.ensure_demo_model(Path(choice.path), python, self.root)
        self.plan = self.preflight(choice.path, device)
        command = engine_command(s, choice.path, device, python)
        self.out(f"[engine] {device}: {command.printable()}")
        self._model_is_demo = choice.is_demo
        # On CPU, vLLM's engine pins a core and its API server streams hundreds of
        # tokens/s on the other: a lower priority keeps the chat and the browser
        # responsive (and Stop prompt) on a small machine.
        return ManagedProcess("engine", command.argv, self.log_path, env=command.env,
                              cwd=self.root, marker=doctor.START_MARKER,
                              nice=CPU_ENGINE_NICE if device == "cpu" else 0)

    def preflight(self, model: str, device: str) -> Optional[kp.Plan]:
        """Refuse settings that cannot work; return the KV plan to compare with vLLM's."""
        try:
            shape, _ = load_shape(model)
            memory = read_memory(device)
        except Exception as exc:  # no config yet (first download) or no NVML: vLLM will tell
            self.out(f"[plan] pre-flight checks skipped: {exc}")
            return None
        problems = preflight.check(self.settings, shape, memory)
        if problems:
            raise StartupFailed("Pre-flight checks failed:\n" + "\n".join(f"  - {p}" for p in problems))
        return preflight.plan_for(self.settings, shape, memory)

    def start_engine(self) -> EngineInfo:
        assert self.engine is not None
        s = self.settings
        write_state(s, "starting")
        self.engine.start()
        status = StatusLine("engine")
        entry = wait_until(
            lambda: probe_engine(s.engine_base_url, s.api_key_value),
            lambda: not self.engine.alive(), s.startup_timeout_s, status,
            lambda: f"starting vLLM (log: {self.log_path.name}) {_last_log_line(self.log_path)}",
        )
        if not entry:
            reason = ("exited with code %s" % self.engine.returncode if not self.engine.alive()
                      else f"was not ready after {s.startup_timeout_s:.0f} s")
            status.done(f"vLLM {reason}")
            write_state(s, "failed", reason=reason)
            self.engine.stop()
            raise StartupFailed(self.explain_engine_failure(f"vLLM {reason}."))
        status.done(f"vLLM ready at {s.engine_base_url}")
        write_state(s, "ready")
        self._unhealthy_since = None
        self.info = EngineInfo(entry.get("id", s.served_model_name), self._model_is_demo,
                               int(entry.get("max_model_len") or s.max_model_len))
        return self.info

    def explain_engine_failure(self, headline: str) -> str:
        lines = read_tail(self.log_path)
        diagnosis = doctor.explain(lines, since_last_start=True)
        if diagnosis:
            return f"{headline} Diagnosis from {self.log_path}:\n{diagnosis}"
        tail = "\n".join("    " + line for line in doctor.last_error_lines(lines))
        return f"{headline} No known cause found; last lines of {self.log_path}:\n{tail}"

    def report_kv(self) -> None:
        report = parse_kv_report(read_tail(self.log_path))
        assert self.info is not None
        self.out(f"[engine] max-model-len {self.info.max_model_len} tokens")
        if report.kv_tokens is None:
            return
        memory = f" in {report.kv_memory_gib:.2f} GiB" if report.kv_memory_gib else ""
        self.out(f"[engine] KV cache: {report.kv_tokens:,} tokens{memory}, "
                 f"{report.max_concurrency:.1f} concurrent requests of max-model-len "
                 f"(as vLLM reports in {self.log_path.name})")
        if self.plan is not None:
            self.out(f"[plan]   KV tokens {preflight.compare(self.plan.reported_kv_tokens, report.kv_tokens)}; "
                     f"concurrency predicted {self.plan.max_concurrency:.2f}x / reported "
                     f"{report.max_concurrency:.2f}x")

    # --- the app -----------------------------------------------------------
    def prepare_app(self) -> ManagedProcess:
        s = self.settings
        argv = [sys.executable, "-m", "chainlit", "run", str(self.root / "app" / "chat.py"),
                "--headless", "--host", s.app_host, "--port", str(s.app_port)]
        # The app gets the supervisor's validated settings, with the engine it started.
        env = {**s.as_env(), "ERNIE_ENGINE_URL": s.engine_base_url,
               "CHAINLIT_APP_ROOT": str(self.root)}
        if s.chat_db is not None:
            env["CHAINLIT_AUTH_SECRET"] = auth_secret(self.root / ".cache" / "chainlit-auth-secret")
        return ManagedProcess("app", argv, self.app_log_path, env=env, cwd=self.root)

    def start_app(self) -> None:
        assert self.app is not None
        self.app.start()
        status = StatusLine("app")
        ok = wait_until(lambda: _http_ok(self.settings.app_url), lambda: not self.app.alive(),
                        120, status, lambda: "starting Chainlit")
        if not ok:
            status.done("Chainlit did not start")
            tail = "\n".join("    " + l for l in read_tail(self.app_log_path)[-10:])
            raise StartupFailed(f"The Chainlit app did not start; last lines of "
                                f"{self.app_log_path}:\n{tail}")
        status.done(f"Chainlit ready at {self.settings.app_url}")

    # --- the whole life cycle ----------------------------------------------
    def secure_exposed_engine(self) -> None:
        """vLLM on a non-loopback address must require a key: make one if none is set."""
        s = self.settings
        if not s.starts_engine or s.api_key is not None or is_loopback(s.engine_host):
            return
        path = self.root / ".cache" / "engine-api-key"
        key = read_or_create_secret(path)
        self.settings = s.model_copy(update={"api_key": SecretStr(key)})
        self.out(f"[security] vLLM listens on {s.engine_host}, so it requires an API key. None was "
                 f"set (ERNIE_API_KEY); one was generated and saved in {path} (readable by you "
                 "only). Clients must send it as 'Authorization: Bearer <key>'; the chat app does.")

    def start(self) -> None:
        self.secure_exposed_engine()
        self.check_before_start()
        if self.settings.starts_engine:
            self.engine = self.prepare_engine()
            self.start_engine()
            self.report_kv()
        else:
            self.out(f"[engine] using the server at {self.settings.engine_url} (not started here)")
        self.app = self.prepare_app()
        self.start_app()

    def watch(self) -> str:
        """Restart whichever process dies or hangs; return why, once one cannot be kept up."""
        failures = {"engine": 0, "app": 0}
        while True:
            if self.engine_hung():
                self.out(f"[engine] /health has not answered for {HUNG_AFTER_S:.0f} s: the engine "
                         "is hung; killing it")
                self.engine.kill()
            for proc, restart in ((self.engine, self.start_engine), (self.app, self.start_app)):
                if proc is None or proc.alive():
                    if proc is not None and time.monotonic() - proc.started_at > STABLE_AFTER_S:
                        failures[proc.name] = 0
                    continue
                failures[proc.name] += 1
                self.out(f"[{proc.name}] exited with code {proc.returncode}")
                if proc.name == "engine":  # first: the chat tells its users from this file
                    write_state(self.settings, "restarting")
                proc.stop(grace_s=5)  # its children (vLLM's engine core) may still run
                if proc.name == "engine":
                    self.out(self.explain_engine_failure("The engine stopped."))
                    final = self.unrecoverable()
                    if final:
                        write_state(self.settings, "failed", reason=final)
                        return final
                if failures[proc.name] > self.settings.max_restarts:
                    return (f"The {proc.name} failed {failures[proc.name]} times in a row; giving "
                            f"up (ERNIE_MAX_RESTARTS={self.settings.max_restarts}).")
                delay = backoff_delay(failures[proc.name])
                self.out(f"[{proc.name}] restarting in {delay:.0f} s "
                         f"(attempt {failures[proc.name]} of {self.settings.max_restarts})")
                time.sleep(delay)
                try:
                    restart()
                except StartupFailed as exc:
                    self.out(str(exc))
            time.sleep(0.5)

    def engine_hung(self) -> bool:
        """True once a running engine has failed every /health probe for HUNG_AFTER_S."""
        if self.engine is None or not self.engine.alive() or self.info is None:
            return False
        now = time.monotonic()
        if now - self._last_probe < HEALTH_EVERY_S:
            return False
        self._last_probe = now
        if _http_ok(f"{self.settings.engine_base_url}/health", HEALTH_TIMEOUT_S):
            self._unhealthy_since = None
            return False
        self._unhealthy_since = self._unhealthy_since or now
        return now - self._unhealthy_since >= HUNG_AFTER_S

    def unrecoverable(self) -> Optional[str]:
        """A final message when the log shows a failure that a restart cannot fix."""
        findings = doctor.diagnose(read_tail(self.log_path), since_last_start=True)
        fatal = [f for f in findings if f.key in doctor.NOT_FIXED_BY_RESTART]
        if not fatal:
            return None
        return ("The engine cannot start with these settings, so it is not restarted: "
                + "; ".join(f"{f.title}. Fix: {f.fix}" for f in fatal))

    def stop(self) -> None:
        for proc in (self.app, self.engine):
            if proc is not None and proc.pid is not None:
                proc.stop()
        if self.engine is not None:
            write_state(self.settings, "stopped")


def read_or_create_secret(path: Path) -> str:
    """A random secret kept in ``path`` (mode 0600): made once, never printed or logged."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


def auth_secret(path: Path) -> str:
    """Chainlit signs login tokens with this: made once per install, never in git or logs."""
    return os.environ.get("CHAINLIT_AUTH_SECRET") or read_or_create_secret(path)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def raise_shutdown(signum, frame) -> None:
    """A SIGTERM handler: SIGTERM then unwinds like Ctrl-C, through every ``finally``."""
    raise Shutdown(signal.Signals(signum).name)


def run(settings: Settings, out=print) -> int:
    """``ernie-chat up``: returns the process exit code."""
    signal.signal(signal.SIGTERM, raise_shutdown)
    stack = Stack(settings, out=out)
    try:
        stack.start()
        out(f"Chat:   {settings.app_url}")
        out(f"Engine: {settings.engine_base_url}")
        if stack.info and stack.info.is_demo:
            out("Serving the built-in DEMO model (word salad by design); set ERNIE_MODEL for a real one.")
        out("Press Ctrl-C to stop.")
        out(f"ERROR: {stack.watch()}")
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
        stack.stop()
        out("Stopped.")

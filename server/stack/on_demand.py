"""Models of ERNIE_MODELS started on demand, as llama-swap does (ERNIE_MODELS_AT_ONCE, ERNIE_MODEL_IDLE_S).

When the models do not all fit at once, `up` starts the first ERNIE_MODELS_AT_ONCE of them;
each other one is *asleep* (its state file says so, server/engine_state.py) until a chat asks
for it: the chat touches its ``model-used-<served name>`` file (server/model_wake.py), and a
use newer than the model's stop wakes it.  To make room, the least recently used model that
is not answering a request stops first; when every loaded model is busy the asked one waits,
its state saying so.  With ERNIE_MODEL_IDLE_S a model with no request for that long stops
too.  A model's last start time (``load_s``) stays in its state file: the chat says "took
41 s last time".  A woken model is warmed up as `up` warms the models it starts first
(server/stack/warmup.py).

A model stopped on purpose stays *held* (``Holds.hold``, server/stack/running.py), so the
watch loop takes its stop for no crash.  The work runs in one thread that lives as long as
`up`: a child's PR_SET_PDEATHSIG fires when the thread that started it ends
(server/stack/processes.py).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Sequence

import httpx

from server.metrics import NoEngineStats, fetch_metrics
from server.model_wake import last_used
from server.stack import warmup
from server.stack.engine_tier import EngineTier, StartupFailed
from server.stack.running import RunningStack

# A model used this recently may have a reply on its way that its /metrics does not show yet.
RECENT_S = 10.0
POLL_S = 0.5


def first_started(names: Sequence[str], at_once: int) -> tuple[str, ...]:
    """The models `up` starts: the first ``at_once``, in ERNIE_MODELS' order."""
    return tuple(names[:at_once])


def asked_for(asleep_since: dict[str, float], used: dict[str, Optional[float]]) -> list[str]:
    """The asleep models a chat asked for since they stopped, the longest waiting first."""
    asked = [name for name, since in asleep_since.items() if (used.get(name) or 0) > since]
    return sorted(asked, key=lambda name: used[name])


def least_recently_used(activity: dict[str, float], busy_names: set[str]) -> Optional[str]:
    """The loaded model to stop for another: the one used longest ago of those not busy."""
    free = [name for name in activity if name not in busy_names]
    return min(free, key=lambda name: activity[name]) if free else None


def idle(activity: dict[str, float], now: float, idle_s: float) -> list[str]:
    """The loaded models not used for ``idle_s`` (0: none ever is); whether a long reply still
    runs in one, only its engine knows."""
    if not idle_s:
        return []
    return [name for name, last in activity.items() if now - last >= idle_s]


def running_requests(tier: EngineTier) -> int:
    """Requests running or waiting in the tier's engine; 0 when it does not say."""
    try:
        stats = fetch_metrics(tier.engines[0].url, tier.settings.api_key_value, timeout_s=2.0)
    except (httpx.HTTPError, NoEngineStats):
        return 0
    return stats.running + stats.waiting


class OnDemand:
    """The models' tiers of one `up`, woken and put to sleep by ``step`` (module docstring).

    ``stack`` is server.stack.supervisor's Stack, seen as the ``RunningStack`` of
    server/stack/running.py (the supervisor imports this module)."""

    def __init__(self, stack: RunningStack, tiers: list[EngineTier], at_once: int, idle_s: float,
                 out: Callable[[str], None] = print,
                 requests: Callable[[EngineTier], int] = running_requests):
        self.stack, self.at_once, self.idle_s, self.out = stack, at_once, idle_s, out
        self.tiers = {tier.model: tier for tier in tiers}
        self.requests = requests
        self.asleep: dict[str, float] = {}     # name -> when it stopped (time.time())
        self.ready_at: dict[str, float] = {}   # name -> when it last became ready
        self.waiting: set[str] = set()         # asked for, no room yet (told once)
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None

    @property
    def started_first(self) -> tuple[str, ...]:
        return first_started(list(self.tiers), self.at_once)

    def park(self) -> None:
        """Before `up` starts the engines: every model after the first ``at_once`` is asleep."""
        for name, tier in self.tiers.items():
            if name not in self.started_first:
                self.stack.holds.park(tier.engines[0].label)
                self.fall_asleep(name)
        if self.asleep:
            self.out(f"[on demand] {', '.join(self.asleep)}: started on a chat's first request "
                     f"(ERNIE_MODELS_AT_ONCE={self.at_once})")

    def begin(self) -> None:
        now = time.time()
        self.ready_at = {name: now for name in self.tiers if name not in self.asleep}
        self.thread = threading.Thread(target=self.serve, name="on-demand", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step(time.time())
            except Exception as exc:  # the thread must live on: its children die with it
                self.out(f"[on demand] {type(exc).__name__}: {exc}")
            self.stopping.wait(POLL_S)

    def end(self) -> None:
        """At `up`'s end, before the tiers stop: no model wakes any more."""
        self.stopping.set()

    def join(self, timeout_s: float = 30.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout_s)

    # --- one look ---------------------------------------------------------------
    def activity(self) -> dict[str, float]:
        """Each loaded model's last use, or its start if later."""
        return {name: max(last_used(self.stack.settings, name) or 0, self.ready_at.get(name, 0))
                for name in self.tiers if name not in self.asleep}

    def busy(self, name: str, last: float, now: float) -> bool:
        # A use too recent to show in the engine's /metrics yet counts as a request.
        return now - last < RECENT_S or self.requests(self.tiers[name]) > 0

    def step(self, now: float) -> None:
        used = {name: last_used(self.stack.settings, name) for name in self.asleep}
        for name in asked_for(self.asleep, used):
            if self.stopping.is_set() or not self.make_room(name, now):
                return
            self.wake(name)
            now = time.time()
        activity = self.activity()
        for name in idle(activity, now, self.idle_s):
            if not self.busy(name, activity[name], now):
                self.put_to_sleep(name, f"no request for {self.idle_s:g} s (ERNIE_MODEL_IDLE_S)")

    def make_room(self, name: str, now: float) -> bool:
        activity = self.activity()
        if len(activity) < self.at_once:
            return True
        victim = least_recently_used(activity, {other for other, last in activity.items()
                                                if self.busy(other, last, now)})
        if victim is None:
            if name not in self.waiting:
                self.waiting.add(name)
                self.out(f"[on demand] {name} waits: every model that runs is answering")
                self.tiers[name].state("asleep", waiting=True)
            return False
        return self.put_to_sleep(victim, f"making room for {name} (least recently used)")

    # --- acting -----------------------------------------------------------------
    def fall_asleep(self, name: str) -> None:
        self.asleep[name] = time.time()
        self.tiers[name].state("asleep")

    def put_to_sleep(self, name: str, why: str) -> bool:
        engine = self.tiers[name].engines[0]
        if not self.stack.holds.hold(engine.label, engine.proc):
            return False  # it died: the watch loop restarts it, then it may go
        self.out(f"[on demand] stopping {name}: {why}")
        self.tiers[name].stop()
        self.fall_asleep(name)
        return True

    def wake(self, name: str) -> None:
        tier = self.tiers[name]
        self.waiting.discard(name)
        self.out(f"[on demand] starting {name}: a chat asked for it")
        try:
            tier.start_all()
        except StartupFailed as exc:  # its state says failed; a later request tries again
            self.out(str(exc))
            self.asleep[name] = time.time()
            return
        del self.asleep[name]
        self.ready_at[name] = time.time()
        self.stack.holds.release(tier.engines[0].label)
        tier.report()
        if warmup.wanted(self.stack.settings) and not self.stopping.is_set():
            warmup.warm_tier(tier, self.out)

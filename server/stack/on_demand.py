"""Models of ERNIE_MODELS started on demand, as llama-swap does (ERNIE_MODELS_AT_ONCE, ERNIE_MODEL_IDLE_S).

When the models do not all fit at once, `up` starts the first ERNIE_MODELS_AT_ONCE of them;
each other one is *asleep* (its state file says so, server/engine_state.py) until a chat asks
for it: the chat touches its ``model-used-<served name>`` file (server/model_wake.py), and a
use newer than the model's stop wakes it.  To make room, the least recently used model that
is not answering a request stops first; when every loaded model is busy the asked one waits,
its state saying so.  With ERNIE_MODEL_IDLE_S a model with no request for that long stops
too.  A model's last start time (``load_s``) stays in its state file: the chat says "took
41 s last time".

A model stays loaded at least ERNIE_MODEL_MIN_LOADED_S after it was started or woken
before another model's request may push it out (``room_for``): without it one user could
keep two models swapping, a message to the asleep one whenever the loaded one had been
idle ``RECENT_S``, each swap costing the loaded model's users two loads.  The one exception
is the model it pushed out when it woke: that one may have its place back as soon as the
newcomer is idle, or a single message to an asleep model would cost the loaded model's
users the whole minimum on top of the two loads (tests/unit/test_on_demand.py simulates
the attack on a clock, with and without the minimum).  The idle timeout
(ERNIE_MODEL_IDLE_S) still stops a model nobody uses, minimum or not.

A woken model is warmed up as `up` warms the models it starts first (server/stack/warmup.py).

A model stopped on purpose stays *held* (``Holds.hold``, server/stack/running.py), so the
watch loop takes its stop for no crash.  The work runs in one thread that lives as long as
`up`: a child's PR_SET_PDEATHSIG fires when the thread that started it ends
(server/stack/processes.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Loaded:
    """A loaded model as ``room_for`` sees it: its last use (or its start, if later), whether
    it is answering, when it became ready, and the models it pushed out when it woke."""

    last: float
    busy: bool
    ready_at: float
    pushed_out: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Room:
    """``room_for``'s answer: the model to stop, or none and until when the asked one waits
    (None: until a model stops answering)."""

    victim: Optional[str]
    until: Optional[float] = None


def kept_until(model: Loaded, min_loaded_s: float) -> float:
    return model.ready_at + min_loaded_s


def room_for(asked: str, loaded: dict[str, Loaded], now: float, min_loaded_s: float) -> Room:
    """The loaded model to stop for ``asked``: the least recently used one that is not
    answering and was loaded at least ``min_loaded_s`` ago, or pushed ``asked`` out when it
    woke (module docstring).  None of them: ``asked`` waits, until the first one's minimum
    ends when one is merely young."""
    movable = {name: model for name, model in loaded.items() if not model.busy}
    free = {name: model.last for name, model in movable.items()
            if now >= kept_until(model, min_loaded_s) or asked in model.pushed_out}
    victim = least_recently_used(free, set())
    if victim is not None:
        return Room(victim)
    return Room(None, min((kept_until(model, min_loaded_s) for model in movable.values()), default=None))


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
                 requests: Callable[[EngineTier], int] = running_requests,
                 min_loaded_s: float = 0.0, clock: Callable[[], float] = time.time,
                 used: Optional[Callable[[str], Optional[float]]] = None):
        self.stack, self.at_once, self.idle_s, self.out = stack, at_once, idle_s, out
        self.tiers = {tier.model: tier for tier in tiers}
        self.requests, self.min_loaded_s, self.clock = requests, min_loaded_s, clock
        self.used = used or (lambda name: last_used(self.stack.settings, name))
        self.asleep: dict[str, float] = {}     # name -> when it stopped (clock())
        self.ready_at: dict[str, float] = {}   # name -> when it last became ready
        self.pushed_out: dict[str, frozenset[str]] = {}  # name -> who it pushed out when it woke
        self.waiting: dict[str, set[bool]] = {}  # asked for, no room yet: why told (once each)
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
        now = self.clock()
        self.ready_at = {name: now for name in self.tiers if name not in self.asleep}
        self.thread = threading.Thread(target=self.serve, name="on-demand", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step(self.clock())
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
        return {name: max(self.used(name) or 0, self.ready_at.get(name, 0))
                for name in self.tiers if name not in self.asleep}

    def busy(self, name: str, last: float, now: float) -> bool:
        # A use too recent to show in the engine's /metrics yet counts as a request.
        return now - last < RECENT_S or self.requests(self.tiers[name]) > 0

    def step(self, now: float) -> None:
        used = {name: self.used(name) for name in self.asleep}
        for name in asked_for(self.asleep, used):
            if self.stopping.is_set():
                return
            made = self.make_room(name, now)
            if made is None:
                return
            self.wake(name, made)
            now = self.clock()
        activity = self.activity()
        for name in idle(activity, now, self.idle_s):
            if not self.busy(name, activity[name], now):
                self.put_to_sleep(name, f"no request for {self.idle_s:g} s (ERNIE_MODEL_IDLE_S)")

    def make_room(self, name: str, now: float) -> Optional[frozenset[str]]:
        """Room for ``name``: the models stopped for it (none when there was room), or None
        when it must wait (its state and `up`'s output say why, once)."""
        activity = self.activity()
        if len(activity) < self.at_once:
            return frozenset()
        loaded = {other: Loaded(last, self.busy(other, last, now), self.ready_at.get(other, 0.0),
                                self.pushed_out.get(other, frozenset()))
                  for other, last in activity.items()}
        room = room_for(name, loaded, now, self.min_loaded_s)
        if room.victim is None:
            self.wait(name, room.until)
            return None
        victim = loaded[room.victim]
        early = now < kept_until(victim, self.min_loaded_s)
        why = (f"{name}, which it pushed out, is asked for again" if early
               else "least recently used")
        if not self.put_to_sleep(room.victim, f"making room for {name} ({why})"):
            return None
        # Having one's place back early gives no right to take it back early in turn.
        return frozenset() if early else frozenset({room.victim})

    def wait(self, name: str, until: Optional[float]) -> None:
        told = self.waiting.setdefault(name, set())
        if (until is None) in told:
            return
        told.add(until is None)
        if until is None:
            self.out(f"[on demand] {name} waits: every model that runs is answering")
            self.tiers[name].state("asleep", waiting=True)
            return
        self.out(f"[on demand] {name} waits: each model that runs was started or woken less than "
                 f"{self.min_loaded_s:g} s ago or is answering (ERNIE_MODEL_MIN_LOADED_S); "
                 f"the first may stop at {time.strftime('%H:%M:%S', time.localtime(until))}")
        self.tiers[name].state("asleep", waiting=True, until=until)

    # --- acting -----------------------------------------------------------------
    def fall_asleep(self, name: str) -> None:
        self.asleep[name] = self.clock()
        self.pushed_out.pop(name, None)
        self.tiers[name].state("asleep")

    def put_to_sleep(self, name: str, why: str) -> bool:
        engine = self.tiers[name].engines[0]
        if not self.stack.holds.hold(engine.label, engine.proc):
            return False  # it died: the watch loop restarts it, then it may go
        self.out(f"[on demand] stopping {name}: {why}")
        self.tiers[name].stop()
        self.fall_asleep(name)
        return True

    def wake(self, name: str, pushed_out: frozenset[str] = frozenset()) -> None:
        tier = self.tiers[name]
        self.waiting.pop(name, None)
        self.out(f"[on demand] starting {name}: a chat asked for it")
        try:
            tier.start_all()
        except StartupFailed as exc:  # its state says failed; a later request tries again
            self.out(str(exc))
            self.asleep[name] = self.clock()
            return
        del self.asleep[name]
        self.ready_at[name] = self.clock()
        self.pushed_out[name] = pushed_out
        self.stack.holds.release(tier.engines[0].label)
        tier.report()
        if warmup.wanted(self.stack.settings) and not self.stopping.is_set():
            warmup.warm_tier(tier, self.out)

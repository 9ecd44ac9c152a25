"""A rolling restart run on the live stack: `ernie-chat restart`'s request taken, checked,
and carried out step by step in a thread of its own (what each step does and what may
change: server/stack/rolling.py).

The thread holds each process while it restarts it (``Holds.hold``,
server/stack/running.py), so the watch loop, which goes on keeping the other
processes up, takes the stop for no crash.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from server.errors import ErnieChatError
from server.settings import Settings, env_name, load_settings
from server.stack import balancer_runtime, restart_control, rolling
from server.stack.app_tier import AppTier, Worker
from server.stack.engine_args import EngineCommand
from server.stack.engine_tier import EngineTier
from server.stack.running import RunningStack
from server.stack.topology import Topology

# HAProxy checks every second and needs one pass (balancer.CHECK) to see a started process up.
UP_TIMEOUT_S = 15

# ``stack`` below is server.stack.supervisor's Stack, seen as the ``RunningStack`` of
# server/stack/running.py (the supervisor imports this module).


def begin(stack: RunningStack) -> None:
    """A SIGHUP came: take the request (or make one from the settings as `up` reads them),
    check it, and roll in a thread, so the watch loop keeps the other processes up."""
    if stack.rolling_now.is_set():
        stack.out("[restart] one is already running; this signal is ignored")
        return
    folder = restart_control.run_folder(stack.settings, stack.root)
    restart_control.claim(folder)  # a plain SIGHUP made none: the supervisor's own settings
    request = restart_control.read_json(restart_control.request_file(folder))
    progress = restart_control.Progress(folder, request.get("id", ""), stack.out)
    try:
        values = request.get("settings")
        new = restart_control.settings_from(values) if values is not None else load_settings()
        steps, commands = prepare(stack, new, progress)
    except ErnieChatError as exc:
        progress.end("refused", str(exc))
        restart_control.request_file(folder).unlink(missing_ok=True)
        return
    stack.rolling_now.set()
    if stack.rolling is None:
        stack.rolling = threading.Thread(target=serve, args=(stack,), daemon=True)
        stack.rolling.start()
    stack.restarts.put((new, steps, commands, progress, folder))


def serve(stack: RunningStack) -> None:
    """Every restart of this `up`, in one thread that lives as long as `up`: the kernel
    ends a child when the thread that started it ends (PR_SET_PDEATHSIG is per thread,
    server/stack/processes.py), so a thread per restart would take its processes with it."""
    while True:
        try:
            roll(stack, *stack.restarts.get())
        finally:
            stack.rolling_now.clear()


def with_running_copies(running: Settings, new: Settings) -> Settings:
    """``new``, with the engine copies that run where ERNIE_ENGINE_COPIES is unset: unset means
    `up`'s choice, which for a running stack is what it runs (the copies are fixed while `up`
    runs); a number set is compared as it is."""
    if new.engine_copies is None:
        return new.model_copy(update={"engine_copies": running.engine_copies})
    return new


def prepare(stack: RunningStack, new: Settings,
            progress: restart_control.Progress) -> tuple[list[rolling.Step], list[EngineCommand]]:
    """Refuse what cannot be done; else the steps, and each copy's command under ``new``."""
    t, apps = planned(stack)
    new = with_running_copies(stack.settings, new)
    tier = stack.engines
    engines = tier.engines if tier else []
    names = rolling.check(stack.settings, new, len(engines), t.balanced_engine,
                          len(apps.workers), t.balanced_app, stack.settings.starts_engine)
    commands = tier.reconfigure(new) if tier and engines else []
    apps.reconfigure(new)
    steps = rolling.plan([e.label for e in engines], [w.label for w in apps.workers])
    progress.say("[restart] " + ("changed: " + ", ".join(env_name(n) for n in names)
                                 if names else "no setting changed; restarting every process")
                 + f"; {len(steps)} steps, one process at a time")
    return steps, commands


def planned(stack: RunningStack) -> tuple[Topology, AppTier]:
    """The plan and the app tier: `up` makes both before its watch loop begins a restart."""
    if stack.topology is None or stack.apps is None:
        raise rolling.RestartRefused("the stack is still starting; ask again once it runs")
    return stack.topology, stack.apps


def engine_tier(stack: RunningStack) -> EngineTier:
    """The tier whose copies the engine steps restart (``prepare`` makes them from it)."""
    if stack.engines is None:
        raise rolling.RestartRefused("no engine copy runs here")
    return stack.engines


def roll(stack: RunningStack, new: Settings, steps: list[rolling.Step], commands: list[EngineCommand],
         progress: restart_control.Progress, folder: Path) -> None:
    started = time.monotonic()
    try:
        for number, step in enumerate(steps, 1):
            progress.say(f"[restart] {number}/{len(steps)}: {step.label}")
            restart_one(stack, step, commands, new.drain_timeout_s, progress.say)
        stack.settings = new
        progress.end("done", f"[restart] done in {time.monotonic() - started:.0f} s: every "
                     "engine copy and app worker runs the new settings")
    except Exception as exc:  # the thread's end: whatever stopped it, the command is told
        progress.end("failed", f"[restart] stopped at this step: {exc}")
    finally:
        restart_control.request_file(folder).unlink(missing_ok=True)


def restart_one(stack: RunningStack, step: rolling.Step, commands: list[EngineCommand],
                timeout_s: float, say) -> None:
    """Out of rotation, drained, stopped, started with the new settings, back in rotation."""
    socket = stack.stats_socket
    if step.tier == "engine":
        tier = engine_tier(stack)
        engine = tier.engines[step.index]
        proc, label = engine.proc, engine.label
    else:
        apps = planned(stack)[1]
        worker = apps.workers[step.index]
        proc, label = worker.proc, worker.label
    if not stack.holds.hold(label, proc):
        raise rolling.RestartRefused(f"{label} is down (the supervisor is restarting it)")
    try:
        if step.tier == "engine":
            balancer_runtime.set_state(socket, "engine", step.index, "drain")
            say(f"[restart] {label}: out of rotation (drain); waiting for its streams")
            rolling.wait_drained(lambda: balancer_runtime.sessions(socket, "engine", step.index),
                                 timeout_s, say, f"{label}: streams")
        else:
            balancer_runtime.set_state(socket, "chat", step.index, "maint")
            worker.drain(start=True)
            say(f"[restart] {label}: out of rotation (maint); moving its chats as their replies end")
            rolling.wait_drained(lambda: worker_left(worker), timeout_s, say,
                                 f"{label}: replies and chats")
        proc.stop()
        say(f"[restart] {label}: stopped; starting it with the new settings")
        if step.tier == "engine":
            tier.use(engine, commands[step.index])
            tier.start(engine)
        else:
            apps.start(worker)
    finally:
        # Back in rotation even after a failed start: HAProxy's checks keep a dead process
        # out, and the watch loop's restart of it needs no drain to undo.
        balancer_runtime.set_state(socket, step.tier, step.index, "ready")
        stack.holds.release(label)
    # HAProxy sends it requests only after its next check passes: until then the next step's
    # drain would leave only the servers of last resort.
    up = rolling.wait_for(lambda: balancer_runtime.status(socket, step.tier, step.index) == "UP",
                          UP_TIMEOUT_S)
    say(f"[restart] {label}: back in rotation" + ("" if up else
        f" (HAProxy did not see it up within {UP_TIMEOUT_S} s; going on)"))


def worker_left(worker: Worker) -> int:
    figures = worker.drain(start=False)
    return figures["streaming"] + figures["connected"]

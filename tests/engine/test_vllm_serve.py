"""How server/stack/vllm_serve.py changes vLLM's own start-up, run in the engine's Python.

Each change replaces a function of vLLM's by name, so these tests are what tells us when a
new vLLM moves it. Forked API servers run for real in test_scale.py (their metrics included).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from server.loadtest.lib import kills
from server.paths import ROOT
from tests.support.stack_process import descendants

# What vLLM prints when it is imported on this machine: once per Python that imports it.
IMPORT_LINE = "Triton is installed, but doesn't include CPU backend. Disabling Triton."

PROBE = """
import json, os, sys
from vllm.model_executor.models import registry
from server.stack import vllm_serve

assert vllm_serve.probe_models_in_fork() and vllm_serve.fork_api_servers()
child = registry._run_in_subprocess(lambda: os.getpid())
try:
    registry._run_in_subprocess(lambda: 1 / 0)
    failure = None
except RuntimeError as exc:
    failure = str(exc)
model = registry._LazyRegisteredModel("vllm.model_executor.models.ernie45", "Ernie4_5ForCausalLM")
info = model.inspect_model_cls()
print(json.dumps({"parent": os.getpid(), "child": child, "failure": failure,
                  "architecture": info.architecture, "generates": info.is_text_generation_model}))
"""


def test_the_model_probe_runs_in_a_fork_and_is_cached_as_vllm_caches_it(engine_python, tmp_path):
    done = subprocess.run([str(engine_python), "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                            "VLLM_CACHE_ROOT": str(tmp_path / "vllm")})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["child"] != seen["parent"]                     # another process ...
    assert seen["failure"] == "vLLM's model probe failed: ZeroDivisionError: division by zero"
    assert (seen["architecture"], seen["generates"]) == ("Ernie4_5ForCausalLM", True)
    cached = json.loads((tmp_path / "vllm" / "modelinfos" /
                         "vllm-model_executor-models-ernie45-Ernie4_5ForCausalLM.json").read_text())
    assert cached["modelinfo"]["architecture"] == "Ernie4_5ForCausalLM"  # ... whose answer vLLM keeps


def holders(inodes: set[str], pids: set[int]) -> set[int]:
    """The processes among ``pids`` with a file descriptor on one of those sockets."""
    held = set()
    for pid in pids:
        try:
            links = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
        if links & {f"socket:[{inode}]" for inode in inodes}:
            held.add(pid)
    return held


def test_the_cpu_engine_core_is_forked_and_only_the_api_server_holds_the_port(engine):
    settings, stack = engine
    process = stack.engines.engines[0]
    api_server = process.proc.pid
    log = process.log_path.read_text(errors="replace")
    assert "[vllm_serve] engine core forked" in log
    # Its engine core and worker inherited vLLM instead of importing it again.
    assert log.count(IMPORT_LINE) == 1, log.count(IMPORT_LINE)
    below = descendants(api_server)
    assert below, "the engine core runs in a process of its own"
    # They serve no HTTP: the port is the API server's alone, not held open by them.
    listening = kills.listeners(settings.engine_port)
    assert listening, f"nothing listens on port {settings.engine_port}"
    assert holders(listening, {api_server} | below) == {api_server}

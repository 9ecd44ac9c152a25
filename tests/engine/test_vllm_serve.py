"""How server/stack/vllm_serve.py changes vLLM's own start-up, run in the engine's Python.

Both changes replace a function of vLLM's by name, so these tests are what tells us when a
new vLLM moves it. Forked API servers run for real in test_scale.py (their metrics included).
"""

from __future__ import annotations

import json
import subprocess


from server.paths import ROOT

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

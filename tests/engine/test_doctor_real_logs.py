"""`doctor` on logs of REAL vLLM-CPU failures, each provoked on purpose.

vLLM is started directly (not through `up`, whose pre-flight checks would refuse
these settings before vLLM could fail), in eager mode so each failure comes in
seconds. GPU-only failures (CUDA OOM, free memory below utilization) are tested
on log excerpts in test_doctor.py.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from pathlib import Path

import httpx

from server.paths import ROOT
from server.stack import doctor
from server.stack.engine_args import SERVE_MODULE
from server.stack.processes import ManagedProcess, free_port
from server.stack.vllm_log import last_start, read_tail


def run_until_exit(engine_python: Path, args: list[str], log: Path, timeout_s: float = 240,
                   poke_port: int = 0) -> list[str]:
    """Run vLLM until it fails; with ``poke_port``, send it a request once it serves
    (a failure that only the first forward pass reveals). Its processes fork, as `up` starts
    them (``engine_args.start_method``)."""
    proc = ManagedProcess("engine", [str(engine_python), "-m", SERVE_MODULE, *args], log,
                          env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, marker=doctor.START_MARKER, cwd=ROOT)
    proc.start()
    deadline = time.monotonic() + timeout_s
    try:
        while proc.alive() and time.monotonic() < deadline:
            if poke_port:
                try:
                    httpx.post(f"http://127.0.0.1:{poke_port}/v1/completions", timeout=30,
                               json={"model": args[1], "prompt": "hi", "max_tokens": 2})
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        assert not proc.alive(), "vLLM was expected to fail but kept running"
    finally:
        proc.stop()
    return read_tail(log)


def copy_model(demo_model: Path, target: Path, **config_changes) -> Path:
    shutil.copytree(demo_model, target)
    config = json.loads((target / "config.json").read_text())
    config.update(config_changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def keys(lines):
    return [f.key for f in doctor.diagnose(lines, since_last_start=True)]


def test_kv_pool_too_small_for_max_model_len(engine_python, demo_model, tmp_path):
    lines = run_until_exit(engine_python, [
        "--model", str(demo_model), "--enforce-eager", "--port", str(free_port()),
        "--max-model-len", "65536", "--kv-cache-memory-bytes", str(4 * 1024 * 1024)],
        tmp_path / "llm.log")
    findings = doctor.diagnose(lines, since_last_start=True)
    assert "max_model_len_too_large" in [f.key for f in findings], lines[-15:]
    # 4 MiB at 512 B/token hold 8,192 tokens; vLLM keeps a block back in its estimate,
    # and the fix quotes vLLM's own figure.
    estimate = int(re.search(r"estimated maximum model length is (\d+)", "\n".join(lines)).group(1))
    assert 8192 - 128 <= estimate <= 8192
    assert f"ERNIE_MAX_MODEL_LEN={estimate} " in next(
        f.fix for f in findings if f.key == "max_model_len_too_large")


def test_missing_model_folder(engine_python, tmp_path):
    lines = run_until_exit(engine_python, ["--model", str(tmp_path / "no-such-model"),
                                           "--port", str(free_port())], tmp_path / "llm.log")
    assert "model_not_found" in keys(lines), lines[-15:]


def test_max_model_len_above_the_models_limit(engine_python, demo_model, tmp_path):
    model = copy_model(demo_model, tmp_path / "m", max_position_embeddings=4096)
    lines = run_until_exit(engine_python, ["--model", str(model), "--port", str(free_port()),
                                           "--max-model-len", "8192"], tmp_path / "llm.log")
    assert "max_model_len_above_model_limit" in keys(lines), lines[-15:]


def test_unsupported_architecture(engine_python, demo_model, tmp_path):
    model = copy_model(demo_model, tmp_path / "m", architectures=["Ernie4_5_ForCausalLM"])
    lines = run_until_exit(engine_python, ["--model", str(model), "--port", str(free_port())],
                           tmp_path / "llm.log")
    assert "unsupported_architecture" in keys(lines), lines[-15:]


def test_port_in_use(engine_python, demo_model, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        lines = run_until_exit(engine_python, [
            "--model", str(demo_model), "--enforce-eager", "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024",
            "--kv-cache-memory-bytes", str(64 * 1024 * 1024)], tmp_path / "llm.log")
    assert "port_in_use" in keys(lines), lines[-15:]


def test_cpu_attention_rejects_head_dim_16(engine_python, demo_model, tmp_path):
    model = copy_model(demo_model, tmp_path / "m", head_dim=16, num_attention_heads=8)
    port = free_port()
    lines = run_until_exit(engine_python, [
        "--model", str(model), "--load-format", "dummy", "--enforce-eager",
        "--port", str(port), "--max-model-len", "1024",
        "--kv-cache-memory-bytes", str(64 * 1024 * 1024)], tmp_path / "llm.log", poke_port=port)
    assert "cpu_attention_unsupported" in keys(lines), lines[-15:]


def test_clean_start_has_no_findings(engine):
    """The session engine's own start (up to serving) must not raise false alarms. What comes
    after is the load other tests put on it, which may rightly report a queue."""
    settings, stack = engine
    lines = read_tail(stack.log_path)
    start = last_start(lines)
    served = next(i for i in range(start, len(lines)) if "Application startup complete" in lines[i])
    assert doctor.diagnose(lines[start:served + 1]) == []

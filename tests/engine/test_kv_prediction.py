"""The planner's KV pool against what a REAL vLLM-CPU reports, for three model shapes.

The demo model's own shape is read from the session engine's log (1 GiB pool). Each other
shape gets its own config.json (the demo model's tokenizer, random weights via
``--load-format dummy``) and a short-lived vLLM in eager mode: the KV pool does not
depend on compilation, and eager mode with an explicit pool skips the warm-up, so
each start costs seconds instead of a minute. The engine is stopped as soon as it
has logged its KV cache line.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from server.paths import ROOT
from server.plan import kv_planner as kp
from server.stack.engine_args import SERVE_MODULE
from server.stack.processes import ManagedProcess, free_port
from server.stack.vllm_log import parse_kv_report, read_tail

TOLERANCE = 0.02
SHAPES = {  # name: (config changes, kv pool GiB, max-model-len)
    "deep-2kv-128": ({"num_hidden_layers": 6, "num_key_value_heads": 2, "head_dim": 128,
                      "num_attention_heads": 4, "hidden_size": 256}, 1, 4096),
    "wide-4kv-64": ({"num_hidden_layers": 3, "num_key_value_heads": 4, "head_dim": 64,
                     "num_attention_heads": 8, "hidden_size": 256}, 2, 8192),
}


def make_shape(demo_model: Path, target: Path, changes: dict) -> dict:
    target.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "generation_config.json"):
        if (demo_model / name).exists():
            shutil.copy(demo_model / name, target / name)
    config = {**json.loads((demo_model / "config.json").read_text()), **changes}
    (target / "config.json").write_text(json.dumps(config))
    return config


def reported_kv(engine_python: Path, model: Path, gib: float, max_len: int, log: Path):
    argv = [str(engine_python), "-m", SERVE_MODULE, str(model),
            "--load-format", "dummy", "--enforce-eager", "--port", str(free_port()),
            "--max-model-len", str(max_len), "--kv-cache-memory-bytes", str(int(gib * kp.GIB))]
    proc = ManagedProcess("engine", argv, log, cwd=ROOT)
    proc.start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.alive():
            report = parse_kv_report(read_tail(log))
            if report.complete:
                return report
            time.sleep(1)
        raise AssertionError("no KV cache line in the log:\n" + "\n".join(read_tail(log)[-20:]))
    finally:
        proc.stop()


def assert_predicted(shape: kp.ModelShape, gib: float, max_len: int, report) -> None:
    predicted = kp.plan(shape, device="cpu", max_model_len=max_len, kv_pool_bytes=int(gib * kp.GIB))
    print(f"{shape.name}: KV tokens predicted {predicted.reported_kv_tokens:,} / reported "
          f"{report.kv_tokens:,}; concurrency {predicted.max_concurrency:.2f} / "
          f"{report.max_concurrency:.2f}")
    assert report.pool == "CPU"
    assert abs(predicted.reported_kv_tokens - report.kv_tokens) <= TOLERANCE * report.kv_tokens
    assert abs(predicted.max_concurrency - report.max_concurrency) <= TOLERANCE * report.max_concurrency


@pytest.mark.parametrize("name", list(SHAPES))
def test_predicted_kv_pool_matches_vllm_cpu(name, engine_python, demo_model, tmp_path):
    changes, gib, max_len = SHAPES[name]
    model = tmp_path / name
    config = make_shape(demo_model, model, changes)
    report = reported_kv(engine_python, model, gib, max_len, tmp_path / "llm.log")
    assert_predicted(kp.ModelShape.from_config(config, name), gib, max_len, report)


def test_predicted_kv_pool_of_the_demo_model_matches_the_session_engine(engine, demo_model):
    settings, _ = engine
    config = json.loads((demo_model / "config.json").read_text())
    report = parse_kv_report(read_tail(settings.log_file))
    assert report.complete, "the session engine logged no KV cache line"
    assert_predicted(kp.ModelShape.from_config(config, "demo"), settings.kv_cache_gib,
                     settings.max_model_len, report)

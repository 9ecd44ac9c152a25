"""Several models on one GPU: ERNIE_MODELS (server/settings/model_list.py) and their plan
(server/plan/models.py, `ernie-chat plan --models`).

Expected figures are worked out here from the single-model plan and the documented split
(docs/memory.md, "Several models on one GPU"), not by calling the split a second time.
"""

from __future__ import annotations

import json
import math

import pytest

from server.cli import build_parser
from server.errors import BadInput
from server.plan import kv_planner as kp
from server.plan import models, preflight, report
from server.plan.device import DeviceMemory
from server.plan.model_config import load_shape
from server.settings import SettingsError, load_settings
from server.settings.model_list import ModelEntry, parse_models
from tests.support.plans import plan_cli, ERNIE, GIB, gpu

pytestmark = pytest.mark.usefixtures("clean_env")
# A 7B-class shape (GQA, 28 layers): 14 GiB of weights, 56 KiB of KV per token.
BIG_CONFIG = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
              "hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064,
              "max_position_embeddings": 32768, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("big-model")
    (folder / "config.json").write_text(json.dumps(BIG_CONFIG))
    return str(folder)


def planned(text: str, memory: DeviceMemory, **settings) -> models.ModelsPlan:
    """As `plan --models TEXT` makes it: the text is checked by the plan, not at loading."""
    settings = load_settings(**settings).model_copy(update={"models": text})
    entries = parse_models(text)
    return models.plan_models(settings, [(e, load_shape(e.name)[0]) for e in entries], memory)


def single_plan(name: str, share: float, max_model_len: int, memory: DeviceMemory) -> kp.Plan:
    """What `plan --model NAME --gpu-memory-utilization SHARE` gives for that model alone."""
    settings = load_settings(model=name, gpu_memory_utilization=share, max_model_len=max_model_len)
    return preflight.plan_for(settings, load_shape(name)[0], memory)


def request_bytes(name: str, max_model_len: int) -> int:
    return math.ceil(max_model_len / 16) * 16 * kp.kv_bytes_per_token(load_shape(name)[0])


def overhead_bytes(name: str) -> int:
    return preflight.gpu_overhead_for(load_settings(), load_shape(name)[0]).before_kv


# --- the setting -----------------------------------------------------------------

def test_unset_is_the_single_model():
    s = load_settings()
    assert s.models == "" and s.model_entries == ()


@pytest.mark.parametrize("value, entries", [
    (f"{ERNIE}", (ModelEntry(ERNIE),)),
    (f"{ERNIE}:4096", (ModelEntry(ERNIE, 4096),)),
    (f" {ERNIE}:4096:0.3 , /models/b::0.25,/models/c:32768 ",
     (ModelEntry(ERNIE, 4096, 0.3), ModelEntry("/models/b", None, 0.25),
      ModelEntry("/models/c", 32768))),
])
def test_valid_values(monkeypatch, value, entries):
    monkeypatch.setenv("ERNIE_MODELS", value)
    assert load_settings().model_entries == entries


@pytest.mark.parametrize("value, says", [
    ("a,,b", "model 2 is empty"),
    ("a,", "model 2 is empty"),
    ("a:1:0.5:3", "'a:1:0.5:3' has 3 colons, at most 2"),
    (":8192", "':8192' has no model name"),
    ("a:8k", "'a:8k': max_model_len '8k' is not a whole number of tokens above 0 (e.g. 8192)"),
    ("a:0", "max_model_len '0' is not a whole number"),
    ("a:-5", "max_model_len '-5' is not a whole number"),
    ("a:8192:1.5", "share '1.5' must be the fraction of the GPU's total memory this model may take, in (0, 1]"),
    ("a:8192:0", "share '0' must be"),
    ("a:8192:half", "share 'half' must be"),
    ("a:8192,b,a::0.2", "a is listed more than once"),
    ("/x/model,/y/model", "two models would be served as model (the last part of their names)"),
])
def test_bad_values_say_what_was_wrong_and_what_to_write(monkeypatch, value, says):
    monkeypatch.setenv("ERNIE_MODELS", value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert f"ERNIE_MODELS={value!r}" in message
    assert says in message
    if "more than once" not in says and "served as" not in says:
        assert "write name[:max_model_len[:share]], comma-separated" in message


@pytest.mark.parametrize("env, says", [
    ({"ERNIE_MODELS": "a::0.5,b::0.6"},
     "the shares in ERNIE_MODELS add up to 1.1, more than ERNIE_GPU_MEMORY_UTILIZATION=0.9 "
     "(the memory of all models together) by 0.2"),
    ({"ERNIE_MODELS": "a::0.5,b::0.4,c"}, "leaving nothing for c (given no share)"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_KV_CACHE_GIB": "4"}, "unset ERNIE_KV_CACHE_GIB"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_ENGINE_COPIES": "2"}, "set ERNIE_ENGINE_COPIES=1"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_ENGINE_URL": "http://10.0.0.5:8000"}, "unset one of them"),
    # How many run at once (on demand: tests/unit/test_on_demand.py).
    ({"ERNIE_MODELS_AT_ONCE": "2"}, "ERNIE_MODELS_AT_ONCE is about the models of ERNIE_MODELS: set "
     "ERNIE_MODELS, or unset ERNIE_MODELS_AT_ONCE"),
    ({"ERNIE_MODEL_IDLE_S": "60"}, "ERNIE_MODEL_IDLE_S is about the models of ERNIE_MODELS"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_MODELS_AT_ONCE": "3"},
     "ERNIE_MODELS_AT_ONCE=3 is more than the 2 models of ERNIE_MODELS"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_MODELS_AT_ONCE": "0"}, "ERNIE_MODELS_AT_ONCE"),
    ({"ERNIE_MODELS": "a,b", "ERNIE_MODEL_IDLE_S": "-1"}, "ERNIE_MODEL_IDLE_S"),
    ({"ERNIE_MODELS": "a::0.5,b::0.6,c", "ERNIE_MODELS_AT_ONCE": "2"},
     "the 2 largest shares of ERNIE_MODELS (a model given none takes 0.45) add up to 1.1"),
])
def test_settings_that_disagree_with_the_models_are_refused(monkeypatch, env, says):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert says in str(info.value)


def test_each_model_is_served_under_the_last_part_of_its_name_on_the_ports_from_the_engines(monkeypatch):
    monkeypatch.setenv("ERNIE_ENGINE_HOST", "0.0.0.0")
    monkeypatch.setenv("ERNIE_ENGINE_PORT", "9100")
    monkeypatch.setenv("ERNIE_MAX_MODEL_LEN", "4096")
    monkeypatch.setenv("ERNIE_API_KEY", "k" * 32)
    monkeypatch.setenv("ERNIE_MODELS", f"{ERNIE}:8192,/models/other/")
    first, second = load_settings().served_models
    assert (first.served_name, first.port, first.max_model_len, first.base_url) == (
        "ERNIE-4.5-0.3B-PT", 9100, 8192, "http://127.0.0.1:9100")
    assert (second.name, second.served_name, second.port, second.max_model_len) == (
        "/models/other/", "other", 9101, 4096)


def test_without_models_the_one_model_is_served_where_the_engine_settings_say(monkeypatch):
    monkeypatch.setenv("ERNIE_SERVED_MODEL_NAME", "mine")
    (only,) = load_settings().served_models
    assert (only.served_name, only.port, only.base_url) == ("mine", 8000, "http://127.0.0.1:8000")


def test_shares_within_a_lower_utilization(monkeypatch):
    monkeypatch.setenv("ERNIE_MODELS", "a::0.3,b::0.2")
    monkeypatch.setenv("ERNIE_GPU_MEMORY_UTILIZATION", "0.5")
    assert [e.share for e in load_settings().model_entries] == [0.3, 0.2]


# --- the split ---------------------------------------------------------------------

def test_two_models_without_shares_split_the_utilization_by_need(big):
    memory = gpu(141)
    result = planned(f"{ERNIE}:8192,{big}:32768", memory)
    assert result.problems == ()
    small, large = result.models
    assert not small.share_given and not large.share_given
    # Together within the utilization, short of it by the rounding to 4 decimals only.
    assert 0.9 - 2e-4 <= small.share + large.share <= 0.9
    # After each overhead, the KV memory goes by one full-length request's bytes: the same
    # number of full-length requests each (up to a block and the rounding).
    total = memory.total_bytes
    kv_left = int(0.9 * total) - overhead_bytes(ERNIE) - overhead_bytes(big)
    wanted = request_bytes(ERNIE, 8192) + request_bytes(big, 32768)
    for model, name, length in ((small, ERNIE, 8192), (large, big, 32768)):
        by_hand = overhead_bytes(name) + kv_left * request_bytes(name, length) / wanted
        assert model.share == math.floor(by_hand / total * 10_000) / 10_000
    assert small.plan.max_concurrency == pytest.approx(large.plan.max_concurrency, rel=2e-3)


@pytest.mark.parametrize("text", ["{ernie}:8192:0.3,{big}:32768", "{ernie}:8192,{big}:16384:0.7",
                                  "{ernie}:2048,{big}"])
def test_each_pool_is_the_single_model_plan_at_its_share(big, text):
    memory = gpu(141)
    result = planned(text.format(ernie=ERNIE, big=big), memory)
    assert result.problems == ()
    for model in result.models:
        alone = single_plan(model.need.name, model.share, model.need.max_model_len, memory)
        assert model.plan == alone
        # The share pays the model's overhead and its pool, nothing else.
        assert model.plan.kv_pool_bytes + model.plan.overhead.before_kv == int(model.share * memory.total_bytes)
    assert result.share_total <= 0.9


def test_a_given_share_is_kept_and_the_other_model_gets_the_rest(big):
    memory = gpu(141)
    small, large = planned(f"{ERNIE}:8192:0.3,{big}:32768", memory).models
    assert small.share == 0.3 and small.share_given
    rest = int((0.9 - 0.3) * memory.total_bytes)
    assert large.share == math.floor(rest / memory.total_bytes * 10_000) / 10_000


def test_an_unset_max_model_len_is_the_setting(big):
    result = planned(f"{ERNIE},{big}", gpu(141), max_model_len=4096)
    assert [m.need.max_model_len for m in result.models] == [4096, 4096]


# --- sets that do not fit ---------------------------------------------------------

def test_the_rest_too_small_for_the_unshared_model_is_refused_by_how_much(big):
    memory = gpu(24)
    result = planned(f"{ERNIE}:8192:0.5,{big}:32768", memory)
    rest = int(0.4 * memory.total_bytes)
    wanted = overhead_bytes(big) + request_bytes(big, 32768)
    assert wanted > rest
    (problem,) = result.problems
    assert f"The models given no share ({big}) get the rest of ERNIE_GPU_MEMORY_UTILIZATION=0.9, " \
           f"{rest / GIB:.2f} GiB, but need at least {wanted / GIB:.2f} GiB" in problem
    assert f"short by {(wanted - rest) / GIB:.2f} GiB" in problem
    assert "Lower the other models' shares" in problem and "serve fewer models" in problem
    assert result.share_total <= 0.9  # even refused, the shares shown stay within it


def test_a_share_too_small_for_one_request_says_the_smallest_share_that_fits(big):
    memory = gpu(24)
    result = planned(f"{ERNIE}:8192:0.03,{big}:32768:0.85", memory)
    (problem,) = result.problems
    need = overhead_bytes(ERNIE) + request_bytes(ERNIE, 8192)
    have = int(0.03 * memory.total_bytes)
    smallest = math.ceil(need / memory.total_bytes * 10_000) / 10_000
    assert problem.startswith(f"{ERNIE}: share 0.03 gives {have / GIB:.2f} GiB")
    assert f"need {need / GIB:.2f} GiB: short by {(need - have) / GIB:.2f} GiB" in problem
    assert f"Give it a share of {smallest:g} or more" in problem
    # That share holds one request; a step less does not.
    assert single_plan(ERNIE, smallest, 8192, memory).num_blocks >= 8192 // 16
    assert single_plan(ERNIE, smallest - 0.0001, 8192, memory).num_blocks < 8192 // 16


def test_a_share_that_holds_less_than_max_model_len_names_the_length_that_fits(big):
    memory = gpu(24)
    share = 0.055  # its pool holds a few thousand tokens, not 8192
    result = planned(f"{ERNIE}:8192:{share},{big}:32768:0.8", memory)
    fits = single_plan(ERNIE, share, 8192, memory).num_blocks * 16
    assert 0 < fits < 8192
    assert any(f"write {ERNIE}:{fits} to give it a max-model-len that fits" in p for p in result.problems)


def test_shares_above_the_utilization_are_refused_in_gib(big):
    memory = gpu(100)
    result = planned(f"{ERNIE}::0.5,{big}::0.5", memory)
    assert any("add up to 1, more than ERNIE_GPU_MEMORY_UTILIZATION=0.9" in p
               and f"by 0.1 ({0.1 * memory.total_bytes / GIB:.2f} GiB)" in p for p in result.problems)


def test_max_model_len_above_the_model_limit(big):
    result = planned(f"{ERNIE}:8192,{big}:65536", gpu(141))
    assert any(f"write {big}:32768 or less in ERNIE_MODELS" in p for p in result.problems)


def test_too_little_free_memory_for_the_shares(big):
    memory = gpu(141, free_gib=60)
    result = planned(f"{ERNIE}:8192:0.1,{big}:32768:0.4", memory)
    wanted = 0.5 * memory.total_bytes
    (problem,) = result.problems
    assert f"short by {(wanted - memory.free_bytes) / GIB:.2f} GiB" in problem


def test_a_cpu_cannot_be_split():
    with pytest.raises(BadInput, match="--gpu-memory-gib"):
        planned(f"{ERNIE}", DeviceMemory("cpu", "2 CPU cores", 64 * GIB, 32 * GIB))


# --- `ernie-chat plan` -------------------------------------------------------------

def build(*argv: str) -> dict:
    return report.build(build_parser().parse_args(["plan", *argv]), load_settings())


def test_plan_without_models_is_the_single_model_plan():
    result = build("--gpu-memory-gib", "141")
    assert "models" not in result
    alone = single_plan(ERNIE, 0.9, 8192, gpu(141))
    assert (result["kv_pool_bytes"], result["num_blocks"]) == (alone.kv_pool_bytes, alone.num_blocks)


def test_model_flag_plans_one_model_even_with_models_set(monkeypatch, big):
    monkeypatch.setenv("ERNIE_MODELS", f"{ERNIE},{big}")
    assert "models" in build("--gpu-memory-gib", "141")
    assert "models" not in build("--gpu-memory-gib", "141", "--model", ERNIE)


def test_questions_about_one_pool_are_refused_with_several_models(big):
    with pytest.raises(BadInput, match="--concurrency plan one model"):
        build("--gpu-memory-gib", "141", "--models", f"{ERNIE},{big}", "--concurrency", "8")


def test_bad_models_flag_is_refused():
    with pytest.raises(BadInput, match="--models.*has 3 colons"):
        build("--gpu-memory-gib", "141", "--models", "a:1:2:3")


def test_cli_table_and_exit_status(big):
    done = plan_cli("--gpu-memory-gib", "141", "--models", f"{ERNIE}:8192:0.3,{big}:32768")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row = next(line for line in lines if line.strip().startswith(ERNIE))
    alone = single_plan(ERNIE, 0.3, 8192, gpu(141))
    assert row.split()[1:] == ["0.3000", f"{0.3 * 141:.2f}", "0.67", "0.58",
                               f"{alone.kv_pool_bytes / GIB:.2f}", f"{alone.kv_pool_tokens:,}",
                               "8,192", f"{alone.max_concurrency:.1f}"]
    assert any(line.strip().startswith(big[-32:]) and "*" in line for line in lines)
    refused = plan_cli("--gpu-memory-gib", "24", "--models", f"{ERNIE}:8192:0.5,{big}:32768", "--json")
    assert refused.returncode == 1
    result = json.loads(refused.stdout)
    assert [m["model"] for m in result["models"]] == [ERNIE, big]
    assert "short by" in result["problems"][0]


def test_at_once_flag_changes_the_split_and_the_refusal(big):
    """`plan --at-once N` plans as ERNIE_MODELS_AT_ONCE=N would: a model given no share gets one
    slot of the utilization instead of the rest beside the others, and the refusal follows."""
    text = f"{ERNIE}:8192:0.5,{big}:32768"
    together = json.loads(plan_cli("--gpu-memory-gib", "24", "--models", text, "--json").stdout)
    assert together["at_once"] == 2 and together["models"][1]["share"] == pytest.approx(0.4, abs=1e-3)
    assert "short by" in together["problems"][0] and "plan --at-once N" in together["problems"][0]
    one = plan_cli("--gpu-memory-gib", "24", "--models", text, "--at-once", "1", "--json")
    assert one.returncode == 0, one.stdout
    alone = json.loads(one.stdout)
    assert alone["at_once"] == 1 and [m["share"] for m in alone["models"]] == [0.5, 0.9]
    assert alone["problems"] == []
    table = plan_cli("--gpu-memory-gib", "24", "--models", text, "--at-once", "1").stdout
    assert "1 at once, the others on demand" in table
    too_many = json.loads(plan_cli("--gpu-memory-gib", "24", "--models", text, "--at-once", "3", "--json").stdout)
    assert "ERNIE_MODELS_AT_ONCE=3 is more than the 2 models" in too_many["problems"][0]
    for bad in ("0", "-1", "two"):
        assert plan_cli("--models", text, "--at-once", bad).returncode == 2, bad
    single = plan_cli("--gpu-memory-gib", "24", "--model", ERNIE, "--at-once", "1")
    assert single.returncode != 0 and "--at-once is how many of several models" in single.stderr

"""`tune`: the choice among measured points, the .env update, and one real 2-point sweep on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server import cli, env_file
from server.loadtest import tune, tune_choice
from server.loadtest.stats import LevelSummary
from server.loadtest.tune_choice import Outcome, Point, TuneError
from server.settings import load_settings
from server.stack.processes import _group_alive, port_free

ROOT = Path(__file__).resolve().parent.parent


def measured(max_model_len, goodput, *, memory=0.9, served=None, status="measured") -> Outcome:
    summary = LevelSummary.from_dict({
        "requests": 10, "completed": 10, "failed": 0, "duration_s": 1.0, "total_prompt_tokens": 0,
        "total_output_tokens": 0, "goodput": goodput, "output_throughput": goodput * 100,
        "request_throughput": goodput, "total_token_throughput": goodput * 100,
        "slo": {"ttft_ms": 500}, "ttft_ms": {"median": 40.0}, "tpot_ms": {"median": 8.0}})
    return Outcome(Point(max_model_len, gpu_memory_utilization=memory), status=status,
                   served_max_model_len=served or max_model_len,
                   summary=summary if status == "measured" else None,
                   reason="" if status == "measured" else "out of memory")


# --- the choice -----------------------------------------------------------------------

def test_best_goodput_among_points_that_serve_the_need():
    outcomes = [measured(2048, 9.0), measured(8192, 5.0), measured(8192, 6.0, memory=0.7),
                measured(8192, 0.0, status="failed")]
    # The 2048 point is fastest but cannot serve 4096-token requests.
    assert tune_choice.choose(outcomes, 4096) is outcomes[2]
    assert tune_choice.choose(outcomes, 2048) is outcomes[0]


def test_served_max_model_len_is_what_the_engine_reports():
    # Asked for 8192 but the engine serves 4096 (e.g. capped): it cannot serve 8192.
    outcomes = [measured(8192, 9.0, served=4096), measured(8192, 3.0)]
    assert tune_choice.choose(outcomes, 8192) is outcomes[1]


def test_a_tie_goes_to_the_smaller_memory_then_the_earlier_point():
    outcomes = [measured(8192, 10.0, memory=0.9), measured(8192, 9.9, memory=0.5),
                measured(8192, 9.0, memory=0.3)]
    # 9.9 is within 2% of 10.0: a tie, and 0.5 uses less memory; 9.0 is 10% worse.
    assert tune_choice.choose(outcomes, 8192) is outcomes[1]
    same = [measured(8192, 4.0, memory=0.7), measured(8192, 4.0, memory=0.7)]
    assert tune_choice.choose(same, 8192) is same[0]


def test_no_point_qualifies_says_why_and_what_to_do():
    outcomes = [measured(2048, 9.0), measured(4096, 8.0), measured(8192, 0.0, status="failed")]
    with pytest.raises(TuneError, match=r"No point serves the 8192-token requests .* longest "
                                        r"max-model-len measured is 4096.*"
                                        r"--max-model-len of at least 8192"):
        tune_choice.choose(outcomes, 8192)
    with pytest.raises(TuneError, match="no point was measured"):
        tune_choice.choose([measured(8192, 0.0, status="failed")], 1024)


def test_explanation_names_the_choice_the_runner_up_and_the_failures():
    outcomes = [measured(8192, 6.0), measured(8192, 4.0, memory=0.7), measured(2048, 9.0),
                measured(16384, 0.0, status="failed")]
    chosen = tune_choice.choose(outcomes, 8192)
    text = tune_choice.explain(chosen, outcomes, 8192, "--need-max-model-len")
    assert text.startswith("Chosen: len 8192, util 0.9.")
    assert "6.00 requests/s" in text and "50% above the next best, len 8192, util 0.7" in text
    assert "1 point(s) were measured but cannot serve 8192" in text
    assert "len 16384, util 0.9: out of memory" in text


# --- the sweep -----------------------------------------------------------------------------

def test_table_warns_of_points_whose_prompts_the_prefix_cache_served():
    fresh, cached = measured(2048, 9.0), measured(4096, 8.0)
    fresh.summary.prefix_cache_hit_rate, cached.summary.prefix_cache_hit_rate = 0.0, 0.98
    table = tune_choice.render_table([fresh, cached])
    assert table.count("WARNING") == 1 and cached.point.label() in table.splitlines()[-1]
    assert fresh.point.label() not in table.splitlines()[-1]
    assert "WARNING" not in tune_choice.render_table([fresh])


def test_sweep_is_the_cartesian_product_in_order():
    points = tune_choice.sweep((2048, 8192), utilizations=(0.5, 0.9), max_num_seqs=(64, 128, 256))
    assert len(points) == 12
    assert points[0] == Point(2048, 0.5, None, 64, None)
    assert points[-1] == Point(8192, 0.9, None, 256, None)
    assert points[1].env_values() == {"ERNIE_MAX_MODEL_LEN": "2048",
                                      "ERNIE_GPU_MEMORY_UTILIZATION": "0.5", "ERNIE_MAX_NUM_SEQS": "128"}


def parse(*argv):
    return cli.build_parser().parse_args(["tune", *argv])


def test_sweep_limits_and_cpu_memory_rules():
    settings = load_settings()
    with pytest.raises(TuneError, match="13 points, more than --max-points 12"):
        tune.build_points(parse("--kv-cache-gib", "1,2,3,4,5,6,7,8,9,10,11,12,13"), settings, "cpu")
    with pytest.raises(TuneError, match="does not apply on a CPU"):
        tune.build_points(parse("--utilization", "0.5"), settings, "cpu")
    with pytest.raises(TuneError, match="not both"):
        tune.build_points(parse("--utilization", "0.5", "--kv-cache-gib", "2"), settings, "cuda")
    cpu = tune.build_points(parse("--max-model-len", "512,1024"), settings, "cpu")
    assert [p.kv_cache_gib for p in cpu] == [1.0, 1.0]        # the CPU default pool, made explicit
    gpu = tune.build_points(parse(), settings, "cuda")
    assert gpu == [Point(settings.max_model_len, settings.gpu_memory_utilization)]


def test_batch_limits_can_include_the_engine_default(capsys):
    settings = load_settings()
    points = tune.build_points(parse("--max-num-seqs", "default,128"), settings, "cuda")
    assert [p.max_num_seqs for p in points] == [None, 128]
    assert "ERNIE_MAX_NUM_SEQS" not in points[0].env_values()   # vLLM's own choice is kept
    with pytest.raises(SystemExit):
        parse("--max-num-batched-tokens", "default,0")
    assert "'0' in 'default,0': each value must be a whole number >= 1 or 'default'" in capsys.readouterr().err


# --- .env -------------------------------------------------------------------------------------

def test_env_update_changes_keys_in_place_and_keeps_everything_else():
    text = ("# my settings\n"
            "ERNIE_MODEL=/models/ernie   # local copy\n"
            "\n"
            "# ERNIE_MAX_MODEL_LEN=1234 (an example, left alone)\n"
            "ERNIE_MAX_MODEL_LEN=8192\n"
            "export ERNIE_MAX_NUM_SEQS=64\n"
            "OTHER_TOOL=1\n")
    new = env_file.updated_env_text(text, {"ERNIE_MAX_MODEL_LEN": "4096", "ERNIE_MAX_NUM_SEQS": "128",
                                       "ERNIE_GPU_MEMORY_UTILIZATION": "0.7"})
    lines = new.splitlines()
    assert lines[:7] == ["# my settings", "ERNIE_MODEL=/models/ernie   # local copy", "",
                         "# ERNIE_MAX_MODEL_LEN=1234 (an example, left alone)",
                         "ERNIE_MAX_MODEL_LEN=4096", "export ERNIE_MAX_NUM_SEQS=128", "OTHER_TOOL=1"]
    assert lines[-1] == "ERNIE_GPU_MEMORY_UTILIZATION=0.7"
    assert lines[-2].startswith("# set by `ernie-chat tune`")
    assert new.endswith("\n")
    # Idempotent: a second write changes nothing.
    assert env_file.updated_env_text(new, {"ERNIE_MAX_MODEL_LEN": "4096"}) == new


def test_write_env_creates_the_file(tmp_path):
    path = tmp_path / ".env"
    env_file.write_env(path, {"ERNIE_KV_CACHE_GIB": "0.5"})
    assert "ERNIE_KV_CACHE_GIB=0.5" in path.read_text().splitlines()


# --- one real sweep ------------------------------------------------------------------------------

@pytest.mark.engine
def test_real_two_point_sweep_on_cpu(demo_model, engine_python, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nERNIE_MAX_MODEL_LEN=1024\n")
    code = cli.main([
        "tune", "--model", str(demo_model), "--engine-python", str(engine_python), "--device", "cpu",
        "--engine-args=--enforce-eager", "--kv-cache-gib", "0.25", "--max-model-len", "512,1024",
        "--need-max-model-len", "600", "--concurrency", "2", "--num-prompts", "6",
        "--input-len", "32", "--output-len", "16", "--point-timeout-s", "240",
        "--total-timeout-s", "540", "--out", str(tmp_path / "tune"), "--write-env",
        "--env-file", str(env_file)])
    result = json.loads((tmp_path / "tune" / "tune.json").read_text())
    points = result["points"]
    assert [p["status"] for p in points] == ["measured", "measured"], points
    for point in points:
        assert point["summary"]["completed"] == 6 and point["goodput"] > 0
        assert point["kv_tokens"] and point["served_max_model_len"] == point["point"]["max_model_len"]
        assert (tmp_path / "tune" / f"point-0{points.index(point) + 1}" / "bench.json").exists()
    # Only the 1024 point serves 600-token requests.
    assert code == 0 and result["chosen"] == 1
    assert result["chosen_env"] == {"ERNIE_MAX_MODEL_LEN": "1024", "ERNIE_KV_CACHE_GIB": "0.25"}
    assert env_file.read_text().startswith("# mine\nERNIE_MAX_MODEL_LEN=1024\n")
    assert "ERNIE_KV_CACHE_GIB=0.25" in env_file.read_text()
    assert (tmp_path / "tune" / "tune.png").stat().st_size > 0
    # No engine is left: every point's process group (vLLM's engine core too) is gone.
    assert not any(_group_alive(p["pid"]) for p in points)
    assert all(port_free("127.0.0.1", p["port"]) for p in points)

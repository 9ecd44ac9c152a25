"""`tune`: the choice among measured points, the .env update, and one real 2-point sweep on CPU."""

from __future__ import annotations


import pytest

from server import cli, env_file
from server.loadtest.lib import plots
from server.loadtest.sweep import choice as tune_choice
from server.loadtest.sweep import points as tune_points
from server.loadtest.sweep import results as tune_results
from server.loadtest.sweep import stats as tune_stats
from server.loadtest.sweep.choice import Outcome, Point, TuneError
from server.settings import load_settings
from tests.support.tune_runs import summary


def measured(max_model_len, *goodputs, memory=0.9, served=None, status="measured", **values) -> Outcome:
    """An outcome with one run per goodput given (one run of 0.0 when none)."""
    runs = [summary(g) for g in goodputs or (0.0,)] if status == "measured" else []
    return Outcome(Point.of(max_model_len=max_model_len, gpu_memory_utilization=memory, **values),
                   status=status, served_max_model_len=served or max_model_len, runs=runs,
                   reason="" if status == "measured" else "out of memory")


# --- statistics: when a difference is a finding ------------------------------------------

def test_spread_is_mean_sample_sd_and_range():
    s = tune_stats.spread([10.0, 12.0, 14.0])
    assert (s.n, s.mean, s.sd, s.min, s.max) == (3, 12.0, 2.0, 10.0, 14.0)
    assert s.render(1) == "12.0 ±2.0 [10.0-14.0]"
    assert tune_stats.spread([7.5]).render(2) == "7.50" and tune_stats.spread([]) is None


def test_disjoint_ranges_of_three_runs_each_are_a_finding():
    # The H200's seeds 8192/0.82 and 4096/0.88 had goodputs like these: apart by 2x.
    a, b = tune_stats.spread([46.9, 44.0, 49.5]), tune_stats.spread([24.2, 27.0, 22.1])
    assert tune_stats.verdict(a, b) == tune_stats.verdict(b, a) == "finding"
    # Equal settings give such ranges by chance 1 time in 10 with 3 runs each, 1 in 126 with 5.
    assert tune_stats.chance_of_finding(3, 3) == pytest.approx(1 / 10)
    assert tune_stats.chance_of_finding(5, 5) == pytest.approx(1 / 126)


def test_overlapping_ranges_are_noise_however_far_apart_the_means():
    # Six of the H200's seven rows were one engine: 21.7 to 46.9 goodput, i.e. noise.
    a, b = tune_stats.spread([46.9, 30.0, 25.0]), tune_stats.spread([21.7, 24.0, 32.9])
    assert abs(a.mean - b.mean) / b.mean > 0.2
    assert tune_stats.verdict(a, b) == "noise"
    # Touching ranges overlap too.
    assert tune_stats.verdict(tune_stats.spread([1, 2, 3]), tune_stats.spread([3, 4, 5])) == "noise"


def test_too_few_runs_are_never_a_finding():
    one, other = tune_stats.spread([10.0]), tune_stats.spread([20.0])
    assert tune_stats.verdict(one, other) == "unresolved"
    two = tune_stats.spread([10.0, 10.5])
    assert tune_stats.verdict(two, tune_stats.spread([30.0, 31.0])) == "unresolved"
    # Within 2% with a single run each: one result, as before there were repeats.
    assert tune_stats.verdict(tune_stats.spread([10.0]), tune_stats.spread([9.9])) == "noise"


# --- the choice -----------------------------------------------------------------------

def test_best_goodput_among_points_that_serve_the_need():
    outcomes = [measured(2048, 9.0), measured(8192, 5.0), measured(8192, 6.0, memory=0.7),
                measured(8192, status="failed")]
    # The 2048 point is fastest but cannot serve 4096-token requests.
    assert tune_choice.choose(outcomes, 4096) is outcomes[2]
    assert tune_choice.choose(outcomes, 2048) is outcomes[0]


def test_served_max_model_len_is_what_the_engine_reports():
    # Asked for 8192 but the engine serves 4096 (e.g. capped): it cannot serve 8192.
    outcomes = [measured(8192, 9.0, served=4096), measured(8192, 3.0)]
    assert tune_choice.choose(outcomes, 8192) is outcomes[1]


def test_noise_is_a_tie_that_goes_to_the_cheaper_point_and_a_finding_is_not():
    big, small = measured(8192, 30.0, 41.0, 46.9, memory=0.9), measured(8192, 24.0, 28.0, 33.0, memory=0.5)
    assert tune_choice.choose([big, small], 8192) is small          # ranges overlap: noise
    apart = measured(8192, 20.0, 21.0, 22.0, memory=0.5)
    assert tune_choice.choose([big, apart], 8192) is big            # every run of big beat it
    # Less memory first, then fewer processes (API servers, engine copies).
    one, four = (measured(8192, 30.0, 33.0, 36.0, api_servers=n) for n in (1, 4))
    four.runs = [summary(g) for g in (31.0, 34.0, 37.0)]
    assert tune_choice.choose([four, one], 8192) is one


def test_single_runs_keep_the_two_percent_tie():
    outcomes = [measured(8192, 10.0, memory=0.9), measured(8192, 9.9, memory=0.5),
                measured(8192, 9.0, memory=0.3)]
    # 9.9 is within 2% of 10.0: a tie, and 0.5 uses less memory; 9.0 is 10% worse.
    assert tune_choice.choose(outcomes, 8192) is outcomes[1]
    same = [measured(8192, 4.0, memory=0.7), measured(8192, 4.0, memory=0.7)]
    assert tune_choice.choose(same, 8192) is same[0]


def test_no_point_qualifies_says_why_and_what_to_do():
    outcomes = [measured(2048, 9.0), measured(4096, 8.0), measured(8192, status="failed")]
    with pytest.raises(TuneError, match=r"No point serves the 8192-token requests .* longest "
                                        r"max-model-len measured is 4096.*"
                                        r"--max-model-len of at least 8192"):
        tune_choice.choose(outcomes, 8192)
    with pytest.raises(TuneError, match="no point was measured"):
        tune_choice.choose([measured(8192, status="failed")], 1024)


def test_explanation_says_finding_with_its_odds():
    outcomes = [measured(8192, 6.0, 6.2, 6.4), measured(8192, 4.0, 4.1, 4.2, memory=0.7),
                measured(2048, 9.0, 9.0, 9.0), measured(16384, status="failed")]
    chosen = tune_choice.choose(outcomes, 8192)
    text = tune_choice.explain(chosen, outcomes, 8192, "--need-max-model-len")
    assert text.startswith("Chosen: len 8192, util 0.9.")
    assert "goodput 6.20 ±0.20 [6.00-6.40] req/s" in text and "over 3 run(s)" in text
    assert "51% above the next best, len 8192, util 0.7: a finding" in text
    assert "1 in 10 by chance alone" in text
    assert "1 point(s) were measured but cannot serve 8192" in text
    assert "len 16384, util 0.9: out of memory" in text


def test_explanation_says_noise_when_the_cheaper_point_wins_a_tie():
    outcomes = [measured(8192, 30.0, 41.0, 46.9), measured(8192, 24.0, 28.0, 33.0, memory=0.5)]
    text = tune_choice.explain(outcomes[1], outcomes, 8192, "ERNIE_MAX_MODEL_LEN")
    assert text.startswith("Chosen: len 8192, util 0.5.")
    assert ("len 8192, util 0.9 had a higher mean goodput (39.30), but the difference is noise "
            "(their ranges of runs overlap): a tie, decided for the cheaper setting") in text


def test_table_shows_spreads_and_the_verdict_per_point():
    outcomes = [measured(8192, 6.0, 6.2, 6.4), measured(8192, 4.0, 4.1, 4.2, memory=0.7),
                measured(8192, 5.9, 6.5, 7.0, memory=0.8), measured(4096, status="failed")]
    table = tune_choice.render_table(outcomes, outcomes[0]).splitlines()
    assert "goodput req/s" in table[0] and "TPOT p50 ms" in table[0] and "drafts accepted" not in table[0]
    assert "6.20 ±0.20 [6.00-6.40]" in table[2] and table[2].endswith("chosen")
    assert table[3].endswith("finding") and table[4].endswith("noise")
    assert table[5].endswith("failed: out of memory")


def test_table_warns_of_points_whose_prompts_the_prefix_cache_served():
    fresh, cached = measured(2048, 9.0), measured(4096, 8.0)
    fresh.runs[0].prefix_cache_hit_rate, cached.runs[0].prefix_cache_hit_rate = 0.0, 0.98
    table = tune_choice.render_table([fresh, cached])
    assert table.count("WARNING") == 1 and cached.point.label() in table.splitlines()[-1]
    assert fresh.point.label() not in table.splitlines()[-1]
    assert "WARNING" not in tune_choice.render_table([fresh])


def test_outcomes_survive_tune_json(tmp_path):
    outcomes = [measured(8192, 6.0, 6.2, 6.4), measured(8192, 4.0, 4.1, memory=0.7),
                measured(4096, status="failed"), Outcome(Point.of("later", max_model_len=2048))]
    header = {"model": "m", "load": {"concurrencies": (4,)}, "labels": [o.point.label() for o in outcomes]}
    tune_results.write(tmp_path, header, outcomes)
    fresh = [Outcome(o.point) for o in outcomes]
    # Measured with every run and failed are done; 2 of 3 runs and never run are not.
    assert tune_results.take_done(tmp_path, header, fresh, repeats=3) == 2
    assert fresh[0].goodput == outcomes[0].goodput and fresh[0].runs[0].slo.ttft_ms == 500
    assert fresh[2].status == "failed" and fresh[1].status == fresh[3].status == "not run"
    with pytest.raises(TuneError, match=r"another sweep \(model differ\)"):
        tune_results.take_done(tmp_path, {**header, "model": "other"}, fresh, repeats=3)


def test_plot_has_a_panel_per_figure(tmp_path):
    outcomes = [measured(8192, 6.0, 6.2, 6.4), measured(8192, 4.0, memory=0.7), measured(4096, status="failed")]
    rows = tune_choice.plot_rows(outcomes, outcomes[0], 8192)
    path = plots.plot_tune(rows, tune_choice.plot_panels(rows), 8192, tmp_path / "t.png")
    from PIL import Image
    width, height = Image.open(path).size
    assert width > 2.5 * height  # four panels side by side


def test_plot_labels_a_named_point_by_its_name_and_others_by_what_differs():
    # The H200 sweep's labels ran to 100 characters and squeezed the panels to slivers.
    named = Outcome(Point.of("2 copies x 4 API servers", max_model_len=2048, gpu_memory_utilization=0.9,
                             engine_copies=2, api_servers=4),
                    status="measured", served_max_model_len=2048, runs=[summary(1.0)])
    plain = measured(2048, 1.0, max_num_seqs=128)
    rows = tune_choice.plot_rows([named, plain], named, 2048)
    assert [r["label"] for r in rows] == ["2 copies x 4 API servers", "seqs 128"]


# --- the sweep -----------------------------------------------------------------------------

def test_sweep_is_the_cartesian_product_in_order():
    points = tune_choice.sweep({"gpu_memory_utilization": (0.5, 0.9), "max_num_seqs": (64, 128, 256)},
                               {"max_model_len": 2048})
    assert len(points) == 6
    assert points[0] == Point.of(max_model_len=2048, gpu_memory_utilization=0.5, max_num_seqs=64)
    assert points[1].env_values() == {"ERNIE_MAX_MODEL_LEN": "2048",
                                      "ERNIE_GPU_MEMORY_UTILIZATION": "0.5", "ERNIE_MAX_NUM_SEQS": "128"}
    assert points[-1].label() == "len 2048, util 0.9, seqs 256"


def parse(*argv):
    return cli.build_parser().parse_args(["tune", *argv])


def test_sweep_limits_and_cpu_memory_rules():
    settings = load_settings()
    with pytest.raises(TuneError, match="13 points, more than --max-points 12"):
        tune_points.build_points(parse("--kv-cache-gib", "1,2,3,4,5,6,7,8,9,10,11,12,13"), settings, "cpu")
    with pytest.raises(TuneError, match="does not apply on a CPU"):
        tune_points.build_points(parse("--utilization", "0.5"), settings, "cpu")
    with pytest.raises(TuneError, match="not both"):
        tune_points.build_points(parse("--utilization", "0.5", "--kv-cache-gib", "2"), settings, "cuda")
    cpu = tune_points.build_points(parse("--max-model-len", "512,1024"), settings, "cpu")
    assert [p.overrides()["kv_cache_gib"] for p in cpu] == [1.0, 1.0]   # the CPU default pool, made explicit
    gpu = tune_points.build_points(parse(), settings, "cuda")
    assert gpu == [Point.of(max_model_len=settings.max_model_len,
                            gpu_memory_utilization=settings.gpu_memory_utilization)]


def test_batch_limits_can_include_the_engine_default(capsys):
    settings = load_settings(max_num_seqs=64)
    points = tune_points.build_points(parse("--max-num-seqs", "default,128"), settings, "cuda")
    assert [p.overrides()["max_num_seqs"] for p in points] == [None, 128]
    # vLLM's own choice: the setting is unset, also where .env sets it.
    assert points[0].env_values()["ERNIE_MAX_NUM_SEQS"] is None
    with pytest.raises(SystemExit):
        parse("--max-num-batched-tokens", "default,0")
    assert "'0' in 'default,0': each value must be a whole number >= 1 or 'default'" in capsys.readouterr().err


def test_any_engine_setting_is_a_dimension():
    settings = load_settings()
    points = tune_points.build_points(parse("--vary", "async-scheduling=on,off", "--vary",
                                            "ERNIE_CUDAGRAPH_MODE=default,FULL_DECODE_ONLY"),
                                      settings, "cuda")
    assert [p.label() for p in points] == [
        f"len {settings.max_model_len}, util 0.9, async_scheduling=on, cudagraph_mode={mode}"
        for mode in ("auto", "FULL_DECODE_ONLY")] + [
        f"len {settings.max_model_len}, util 0.9, async_scheduling=off, cudagraph_mode={mode}"
        for mode in ("auto", "FULL_DECODE_ONLY")]
    typed = tune_points.build_points(parse("--vary", "stream_interval=default,4", "--vary",
                                           "enforce_eager=true"), settings, "cuda")
    assert [p.overrides()["stream_interval"] for p in typed] == [None, 4]
    assert typed[1].env_values()["ERNIE_ENFORCE_EAGER"] == "true"


def test_a_setting_that_reaches_vllm_only_through_its_environment_is_a_dimension():
    """ERNIE_MODEL_RUNNER changes no flag, only VLLM_USE_V2_MODEL_RUNNER."""
    points = tune_points.build_points(parse("--vary", "model_runner=v1,v2"), load_settings(), "cuda")
    assert [p.overrides()["model_runner"] for p in points] == ["v1", "v2"]


@pytest.mark.parametrize("vary, device, message", [
    ("temperature=0.2,0.9", "cuda", "every value gives the vLLM command your settings already give"),
    ("cudagraph_mode=FULL,NONE", "cpu", "cudagraph_mode does not reach vLLM there"),
    ("max_num_seq=4,8", "cuda", "'max_num_seq' is not a setting .did you mean max_num_seqs"),
    ("engine_port=1,2", "cuda", "tune sets engine_port itself"),
    ("model=a,b", "cuda", "tune sets model itself: use --model"),
    ("stream_interval=4,0", "cuda", r"stream_interval=0 is not a valid setting: ERNIE_STREAM_INTERVAL "
                                    "Input should be greater than or equal to 1"),
    ("async_scheduling=on,on", "cuda", "a value is given twice"),
    ("max_model_len=1024", "cuda", "max_model_len is swept twice"),
])
def test_a_dimension_that_cannot_be_swept_is_refused_before_any_start(vary, device, message):
    with pytest.raises(TuneError, match=message):
        tune_points.build_points(parse("--max-model-len", "2048", "--vary", vary), load_settings(), device)


def test_a_combination_vllm_would_refuse_is_refused():
    with pytest.raises(TuneError, match=r"async_scheduling=on, speculative_ngram=3 is not a valid "
                                        "setting: .*cannot go together"):
        tune_points.build_points(parse("--vary", "async_scheduling=on,off", "--vary",
                                       "speculative_ngram=off,3"), load_settings(), "cuda")


def test_baseline_is_vllms_defaults_and_named_points_come_first():
    settings = load_settings(max_num_seqs=256, stream_interval=4, temperature=0.3, max_model_len=8192)
    points = tune_points.build_points(parse("--baseline", "--point", "seed 2048: max_model_len=2048 "
                                            "gpu_memory_utilization=0.85", "--max-num-seqs", "128"),
                                      settings, "cuda", model_max_len=131072)
    assert [p.label() for p in points] == [
        "vLLM defaults: len 131072, api_servers=1, engine_copies=1, util 0.9",
        "seed 2048: len 2048, util 0.85",
        "len 8192, util 0.9, seqs 128"]
    # Every setting that reaches vLLM's command goes back to its default; app settings stay.
    # One server with one API server, as vLLM alone runs, whatever up would start here.
    assert points[0].overrides() == {"max_model_len": 131072, "api_servers": 1, "engine_copies": 1,
                                     "gpu_memory_utilization": 0.9, "kv_cache_gib": None,
                                     "max_num_seqs": None, "stream_interval": None}
    cpu = tune_points.build_points(parse("--baseline"), settings, "cpu", model_max_len=131072)
    assert cpu[0].overrides()["kv_cache_gib"] == 1.0 and len(cpu) == 1
    # A quick start's setting goes back to vLLM's own choice, which compiles.
    quick = tune_points.build_points(parse("--baseline"), load_settings(torch_compile="off"), "cuda",
                                     model_max_len=131072)
    assert quick[0].overrides()["torch_compile"] == "auto"
    # ...and a point that turns compile off is refused on a CPU, as `up` refuses it there.
    with pytest.raises(TuneError, match="torch_compile=off\" cannot run on a cpu: ERNIE_TORCH_COMPILE=off is for a GPU"):
        tune_points.build_points(parse("--point", "quick: torch_compile=off"), settings, "cpu")
    assert len(tune_points.build_points(parse("--point", "quick: torch_compile=off"), settings, "cuda")) == 1
    with pytest.raises(SystemExit):
        parse("--point", "no name=1")


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


def test_plot_only_redraws_a_saved_sweep(tmp_path, capsys):
    outcomes = [measured(8192, 6.0, 6.2, 6.4), measured(8192, 4.0, 4.1, 4.2, memory=0.7)]
    tune_results.write(tmp_path, {}, outcomes, {"chosen": 0, "need_max_model_len": 8192,
                                                "explanation": "Chosen: len 8192, util 0.9."})
    assert cli.main(["tune", "--plot-only", str(tmp_path / "tune.json")]) == 0
    out = capsys.readouterr().out
    assert "6.20 ±0.20 [6.00-6.40]" in out and "Chosen: len 8192, util 0.9." in out
    assert (tmp_path / "tune.png").stat().st_size > 0
    (tmp_path / "bad.json").write_text("{}")
    assert cli.main(["tune", "--plot-only", str(tmp_path / "bad.json")]) != 0
    assert "not a tune.json" in capsys.readouterr().err

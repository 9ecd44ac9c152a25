"""report.html of bench, qa-load --users, capacity and tune: one self-contained page each, built
from the saved JSON, the verdict before the figures, every value escaped."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path

from server.loadtest.bench import report as bench_report
from server.loadtest.bench.run import BenchResult, Level, add_arrivals
from server.loadtest.lib import config
from server.loadtest.lib.html_report import Report, esc
from server.loadtest.lib.stats import RequestRecord, Slo, summarize_level

HOSTILE = '<script>alert("x")</script><img src="https://evil.example/x.png">'


class Page(HTMLParser):
    """The tags of a page, with their attributes, and its text in order."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(self.text)


def check_self_contained(html: str) -> Page:
    page = Page(html)
    names = [tag for tag, _ in page.tags]
    assert names[:1] == ["html"] and "script" not in names and "link" not in names
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            value = attrs.get(name) or ""
            assert not value.lower().startswith(("http:", "https:", "//")), (tag, attrs)
            if tag == "img":
                assert attrs["src"].startswith("data:image/png;base64,")
    assert "evil.example" not in " ".join(str(a) for _, a in page.tags)
    return page


def tiny_png(path: Path) -> Path:
    # A 1x1 PNG, enough to be embedded.
    path.write_bytes(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"))
    return path


def bench_saved(model=HOSTILE, rate=20.0, failed=0, slo=Slo()) -> dict:
    cfg = config.BenchConfig(url="http://127.0.0.1:8000", request_rate=rate, uncapped=True,
                             concurrencies=(40,), slo=slo)
    records = [RequestRecord(i, 40, 256, 16, start_s=i / rate, arrival_s=i / rate,
                             success=i >= failed, error="" if i >= failed else HOSTILE,
                             ttft_s=0.05 + i / 1000, e2e_s=0.5, output_tokens=16) for i in range(40)]
    summary = summarize_level(records, 2.5, slo)
    add_arrivals(summary, records, cfg)
    result = BenchResult("2026-01-01T00:00:00", {"url": cfg.url, "model": model}, cfg.as_dict(),
                         [Level(40, summary, [r.as_dict() for r in records])])
    return json.loads(json.dumps(result.as_dict()))


def test_the_frame_escapes_every_value_and_puts_the_verdict_first():
    html = (Report(HOSTILE, HOSTILE, ok=False, subtitle=HOSTILE).facts(HOSTILE, [(HOSTILE, HOSTILE)])
            .table(HOSTILE, [HOSTILE], [[HOSTILE]], note=HOSTILE).text(HOSTILE, [HOSTILE])
            .pre(HOSTILE, HOSTILE).html())
    page = check_self_contained(html)
    assert "<script>" not in html and esc(HOSTILE) in html
    assert HOSTILE in page.words  # shown as text, not run
    assert html.index('id="verdict"') < html.index("<h2>")


def test_the_bench_report_names_the_rate_and_says_the_verdict_before_the_figures(tmp_path):
    saved = bench_saved()
    tiny_png(tmp_path / "latency-vs-throughput.png")
    path = bench_report.html_report(saved, tmp_path)
    assert path == tmp_path / "report.html"
    html = path.read_text(encoding="utf-8")
    page = check_self_contained(html)
    assert HOSTILE in page.words and "<script>alert" not in html
    words = page.words
    assert "40 of 40 requests completed" in words and "open loop at 20 req/s asked" in words
    assert "requests arrive at 20/s" in words
    assert words.index("requests completed") < words.index("Figures per level") < words.index("Plots")
    assert sum(tag == "img" for tag, _ in page.tags) == 1  # the plot that exists, embedded
    assert 'class="verdict ok"' in html


def test_a_bench_with_failures_or_a_missed_slo_is_not_good_news(tmp_path):
    html = bench_report.html_report(bench_saved(failed=2), tmp_path).read_text(encoding="utf-8")
    assert 'class="verdict bad"' in html and "38 of 40 requests completed" in html
    assert "Errors (each kind once)" in html and "<script>alert" not in html
    missed = bench_report.html_report(bench_saved(slo=Slo(ttft_ms=60)), tmp_path).read_text("utf-8")
    assert "SLO (TTFT &lt;= 60 ms) NOT met: 25% of requests within it" in missed


def test_bench_plot_only_writes_the_report_of_a_saved_result(tmp_path, capsys):
    from server import cli
    (tmp_path / "bench.json").write_text(json.dumps(bench_saved(model="m")), encoding="utf-8")
    assert cli.main(["bench", "--plot-only", str(tmp_path / "bench.json")]) == 0
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "open loop" in html and html.count("data:image/png;base64,") == 2
    assert f"wrote {tmp_path / 'report.html'}" in capsys.readouterr().out


def users_result(tmp_path, hostile_url=HOSTILE) -> dict:
    from server.loadtest.users import report as user_report
    from server.loadtest.users.model import ReplyRecord, UserModel, UserRecord
    model = UserModel(users=2, turns=1, think_s=1.0, ramp_s=2.0, seed=1, arrival_rate=1.0)
    users = [UserRecord(0, 0.5, 0.6, 5.0), UserRecord(1, 2.0, 2.1, 6.0)]
    replies = [ReplyRecord(0, 0, 0.7, 0.2, 2.0, 30, True, outcome="complete"),
               ReplyRecord(1, 0, 2.2, 0.3, 2.5, 30, True, outcome="complete")]
    return user_report.result_from(model, users, replies, [], 6.0, hostile_url, "engine")


def test_the_users_report_says_pass_first_and_names_the_arrival_rate(tmp_path):
    from server.loadtest.users import report as user_report
    result = users_result(tmp_path)
    result["cpu"] = {"cores": 2, "seconds": 6.0, "tokens": 60, "busy_cores": {"machine": 1.0, "load clients": 1.0},
                     "cpu_s_per_1k_tokens": {"machine": 100.0, "load clients": 100.0}}
    paths = user_report.save(result, tmp_path, plots=False)
    assert paths[-1] == tmp_path / "report.html"
    html = paths[-1].read_text(encoding="utf-8")
    page = check_self_contained(html)
    words = page.words
    assert words.index("PASS: 2 users") < words.index("Steady state") and "Poisson, 1 users/s" in words
    assert HOSTILE in words and "<script>alert" not in html
    assert words.index("Steady state") < words.index("CPU by kind of process") and "1.00 (100.000)" in words
    # Built from the saved JSON alone.
    again = user_report.html_report(json.loads((tmp_path / "summary.json").read_text()), tmp_path)
    assert again.read_text(encoding="utf-8") == html


def test_the_capacity_report_gives_the_users_found_first(tmp_path):
    from server.loadtest.users import capacity
    steps = [{"users": n, "ttft_ms_p50": 100.0, "ttft_ms_p99": 300.0 * n, "user_tokens_per_s_p10": 20.0,
              "user_tokens_per_s_p50": 25.0, "replies_per_s": 1.0, "errors": 0, "pass": n <= 2,
              "why": "" if n <= 2 else f"TTFT p99 {HOSTILE}", "tries": 1} for n in (1, 2, 4)]
    steps[1]["cpu"] = {"cores": 16, "seconds": 70.0, "tokens": 7000, "busy_cores": {
        "machine": 2.5, "app workers": 1.5, "other": 1.0}, "cpu_s_per_1k_tokens": {"app workers": 15.0}}
    result = {"kind": "ernie-chat capacity", "through": "engine", "url": HOSTILE,
              "objective": {"ttft_p99_ms": 1000.0, "tokens_per_s": 10.0},
              "user_model": {"think_s": 5, "ramp_s": 10, "window_s": 70, "seed": 0},
              "client_processes": 1, "steps": steps, "users_within": 2,
              "answer": "2 users within the objective (...) through the engine."}
    tiny_png(tmp_path / "capacity.png")
    html = capacity.html_report(json.loads(json.dumps(result)), tmp_path).read_text(encoding="utf-8")
    page = check_self_contained(html)
    words = page.words
    assert words.index("2 users within the objective") < words.index("Every step")
    assert "FAIL: TTFT p99" in words and "<script>alert" not in html and 'verdict ok' in html
    # The CPU by kind of process, for the steps that were sampled: busy cores (CPU-s per 1,000 tokens).
    assert words.index("Every step") < words.index("CPU by kind of process, every step")
    assert "1.50 (15.000)" in words and "1.00" in words


def test_the_tune_report_gives_the_point_chosen_first(tmp_path):
    from server.loadtest.sweep import results as tune_results
    from server.loadtest.sweep.choice import Outcome, Point
    from server.loadtest.lib.stats import LevelSummary
    run = LevelSummary.from_dict({"requests": 10, "completed": 10, "goodput": 5.0,
                                  "request_throughput": 5.0, "output_throughput": 500.0,
                                  "ttft_ms": {"median": 90.0}, "tpot_ms": {"median": 8.0}})
    outcomes = [Outcome(Point.of(max_model_len=8192, gpu_memory_utilization=0.9), status="measured",
                        served_max_model_len=8192, runs=[run]),
                Outcome(Point.of(max_model_len=4096, gpu_memory_utilization=0.8), status="failed",
                        reason=HOSTILE)]
    users = {"users": 3000, "objective": {"ttft_p99_ms": 1000.0, "tokens_per_s": 20.0}, "think_s": 3.0,
             "ramp_s": 10.0, "step_s": 60.0, "processes": 4}
    tune_results.write(tmp_path, {"model": HOSTILE, "users": users}, outcomes, {
        "chosen": 0, "need_max_model_len": 8192, "need_source": "--need",
        "chosen_env": {"ERNIE_MAX_MODEL_LEN": "8192"}, "explanation": f"Chosen because {HOSTILE}"})
    saved = json.loads((tmp_path / "tune.json").read_text(encoding="utf-8"))
    html = tune_results.html_report(saved, tmp_path).read_text(encoding="utf-8")
    page = check_self_contained(html)
    words = page.words
    assert words.index("Point chosen:") < words.index("Every point")
    assert "Point chosen: len 8192, util 0.9 (ERNIE_MAX_MODEL_LEN=8192)" in words
    assert "3000 users (think 3 s, ramp 10 s, steady 60 s) within TTFT p99 <= 1000 ms" in words
    assert "ERNIE_MAX_MODEL_LEN=8192" in words and "<script>alert" not in html
    saved["chosen"] = None
    assert 'verdict bad' in tune_results.html_report(saved, tmp_path).read_text(encoding="utf-8")

"""bench --request-rate and qa-load --arrival-rate: the open loop's schedule (vLLM's), the loop
that keeps it against a stub server, and what the results say of it."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from server.loadtest.bench import report
from server.loadtest.bench.run import BenchResult, Level, add_arrivals
from server.loadtest.bench.workers import run_arrivals
from server.loadtest.lib import arrivals, config
from server.loadtest.lib.load_args import add_load_arguments, config_from_args
from server.loadtest.lib.stats import LevelSummary, RequestRecord, summarize_level

ROOT = Path(__file__).resolve().parents[2]


# --- the schedule (pure) --------------------------------------------------------------

def test_poisson_gaps_average_one_over_the_rate_and_the_last_lands_at_n_over_rate():
    times = arrivals.arrival_times(2000, 20.0, 1.0, random.Random(1))
    assert times == sorted(times) and times[-1] == pytest.approx(2000 / 20.0)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / 20.0, rel=0.01)
    # Exponential gaps: their standard deviation is their mean (coefficient of variation 1).
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.1)
    assert arrivals.mean_gap(times) == pytest.approx(1 / 20.0, rel=0.01)
    assert arrivals.achieved_rate(times) == pytest.approx(20.0)


def test_the_rescaling_puts_the_last_arrival_at_n_over_rate_for_any_seed():
    for seed in range(5):
        times = arrivals.arrival_times(40, 20.0, 1.0, random.Random(seed))
        assert times[-1] == pytest.approx(2.0) and times[0] > 0


def test_burstiness_shapes_the_gaps_and_infinity_makes_them_constant():
    cv = lambda b: (lambda g: statistics.stdev(g) / statistics.fmean(g))(
        [y - x for x, y in zip(*(lambda t: (t, t[1:]))(arrivals.arrival_times(3000, 10.0, b, random.Random(3))))])
    # A gamma of shape k has a coefficient of variation of 1/sqrt(k).
    assert cv(0.25) == pytest.approx(2.0, rel=0.15) and cv(4.0) == pytest.approx(0.5, rel=0.1)
    even = arrivals.arrival_times(5, 4.0, math.inf)
    assert even == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])


def test_an_infinite_rate_sends_everything_at_once_and_bad_values_are_refused():
    assert arrivals.arrival_times(3, math.inf) == [0.0, 0.0, 0.0]
    assert arrivals.arrival_times(0, 5.0) == []
    for rate, burstiness in ((0, 1), (-1, 1), (1, 0), (float("nan"), 1)):
        with pytest.raises(ValueError):
            arrivals.arrival_times(3, rate, burstiness)


def test_the_same_seed_gives_the_same_schedule():
    one = arrivals.arrival_times(50, 3.0, 0.5, random.Random(7))
    assert one == arrivals.arrival_times(50, 3.0, 0.5, random.Random(7))
    assert one != arrivals.arrival_times(50, 3.0, 0.5, random.Random(8))


# --- the command line ------------------------------------------------------------------

def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser, open_loop=True)
    return parser.parse_args(list(argv))


def cfg_of(*argv: str) -> config.BenchConfig:
    return config_from_args(bench_args(*argv), settings=None, url="http://127.0.0.1:8000")


def test_without_a_rate_the_closed_loop_of_concurrency_4_is_unchanged():
    cfg = cfg_of()
    assert not cfg.open_loop and cfg.concurrencies == (4,) and not cfg.uncapped
    assert cfg.as_dict()["open_loop"] is False and cfg.as_dict()["request_rate"] is None


def test_a_rate_without_concurrency_has_no_cap_and_with_one_it_is_vllms_max_concurrency():
    cfg = cfg_of("--request-rate", "20", "--num-prompts", "40")
    assert cfg.open_loop and cfg.uncapped and cfg.concurrencies == (40,)
    assert (cfg.request_rate, cfg.burstiness) == (20.0, 1.0)
    capped = cfg_of("--request-rate", "2.5", "--burstiness", "inf", "--concurrency", "1,8")
    assert not capped.uncapped and capped.concurrencies == (1, 8) and capped.burstiness == math.inf
    saved = json.loads(json.dumps(capped.as_dict()))  # strict JSON: no Infinity
    assert saved["request_rate"] == 2.5 and saved["burstiness"] == "inf" and saved["open_loop"]
    with pytest.raises(SystemExit):
        bench_args("--request-rate", "0")
    with pytest.raises(config.BenchError, match="--processes 3 is more than --concurrency 2"):
        cfg_of("--request-rate", "5", "--concurrency", "2", "--processes", "3")


# --- the loop, against a stub server ---------------------------------------------------

REPLY = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
         + b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in (
             b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n',
             b'data: {"choices": [{"text": "b", "finish_reason": "length"}]}\n\n',
             b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n',
             b"data: [DONE]\n\n")) + b"0\r\n\r\n")


@pytest.fixture
async def stub():
    """A server that answers every completion after ``delay`` seconds, counting in flight."""
    state = {"delay": 0.0, "in_flight": 0, "most": 0}

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                state["in_flight"] += 1
                state["most"] = max(state["most"], state["in_flight"])
                await asyncio.sleep(state["delay"])
                state["in_flight"] -= 1
                writer.write(REPLY)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield state
    server.close()


async def run_open(stub, n, rate, cap, delay, max_s=30.0):
    stub["delay"] = delay
    cfg = config.BenchConfig(url=stub["url"], request_rate=rate, request_timeout_s=10)
    todo = [(i, config.Prompt(f"p{i}", 3, 2), t)
            for i, t in enumerate(arrivals.arrival_times(n, rate, math.inf))]
    records: list[RequestRecord] = []
    await run_arrivals(cfg, "m", todo, cap, cap, True, time.monotonic() + max_s,
                       time.perf_counter(), records)
    return records


async def test_requests_arrive_on_the_schedule_whatever_the_servers_pace(stub):
    # Replies take 0.3 s, arrivals come every 0.05 s: a closed loop of 1 would wait, this does not.
    records = await run_open(stub, 10, 20.0, cap=10, delay=0.3)
    assert all(r.success for r in records) and len(records) == 10
    arrived = sorted(r.arrival_s for r in records)
    # Bounds a loaded machine keeps (the unit tests run beside pip and vLLM starts): never
    # before the schedule's 0.05 s steps, and far sooner than the 2.7 s a closed loop of one
    # would take behind 0.3-s replies.
    assert all(at >= 0.05 * (i + 1) - 0.005 for i, at in enumerate(arrived)), arrived
    assert arrived[-1] < 1.5, arrived
    assert stub["most"] >= 4  # several in flight at once
    # Sent when released: no reply (0.3 s) was waited for.
    assert statistics.median(r.start_s - r.arrival_s for r in records) < 0.1


async def test_the_cap_makes_arrivals_wait_for_a_slot(stub):
    records = await run_open(stub, 4, 100.0, cap=1, delay=0.1)
    assert stub["most"] == 1 and all(r.success for r in records)
    starts = sorted(r.start_s for r in records)
    assert all(b - a >= 0.09 for a, b in zip(starts, starts[1:]))
    waits = sorted(r.start_s - r.arrival_s for r in records)
    assert waits[-1] > 0.2  # the last arrived at 0.04 s and was sent after three replies


async def test_the_time_limit_cancels_requests_in_flight_and_sends_no_more(stub):
    records = await run_open(stub, 20, 10.0, cap=20, delay=5.0, max_s=0.45)
    assert 1 <= len(records) <= 5  # those that arrived before 0.45 s (fewer on a loaded machine)
    assert all(not r.success and "cancelled at the time limit" in r.error for r in records)


def test_the_summary_reports_the_rate_asked_and_achieved_and_survives_json():
    cfg = config.BenchConfig(url="http://x", request_rate=2.0, burstiness=math.inf)
    records = [RequestRecord(i, 8, 10, 2, start_s=i * 0.5 + 0.6, arrival_s=i * 0.5 + 0.5,
                             success=True, ttft_s=0.1, e2e_s=0.2, output_tokens=2) for i in range(4)]
    summary = summarize_level(records, 3.0)
    add_arrivals(summary, records, cfg)
    assert summary.open_loop and summary.request_rate == 2.0
    assert summary.achieved_request_rate == pytest.approx(4 / 2.0)
    assert summary.mean_interarrival_ms == pytest.approx(500.0)
    assert summary.client_wait_ms_mean == pytest.approx(100.0)
    back = LevelSummary.from_dict(json.loads(json.dumps(summary.as_dict())))
    assert back.burstiness == math.inf and back.achieved_request_rate == summary.achieved_request_rate
    closed = summarize_level(records, 3.0)
    add_arrivals(closed, records, config.BenchConfig(url="http://x"))
    assert not closed.open_loop and closed.mean_interarrival_ms is None


def test_the_table_and_csv_say_the_run_was_open_loop():
    cfg = config.BenchConfig(url="http://x", request_rate=2.0, uncapped=True, concurrencies=(4,))
    records = [RequestRecord(i, 4, 10, 2, start_s=i * 0.5, arrival_s=i * 0.5, success=True,
                             ttft_s=0.1, e2e_s=0.2, output_tokens=2) for i in range(4)]
    summary = summarize_level(records, 2.0)
    add_arrivals(summary, records, cfg)
    result = BenchResult("t", {"url": "http://x", "model": "m"}, cfg.as_dict(),
                         [Level(4, summary, [r.as_dict() for r in records])])
    table = report.render(result)
    assert table.startswith("open loop: requests arrive at 2/s (burstiness 1.0, Poisson arrivals), "
                            "no limit on the requests in flight")
    assert "request rate: 2/s asked, 2.7/s achieved" in table
    closed = BenchResult("t", {"url": "u", "model": "m"}, config.BenchConfig(url="u").as_dict(), [])
    assert report.render(closed).startswith("closed loop")
    assert report.csv_row(records[1].as_dict())["arrival_s"] == 0.5


# --- bench --processes with --request-rate ------------------------------------------------

def test_arrivals_are_dealt_in_turn_and_the_slots_shared():
    from server.loadtest.bench.processes import deal_arrivals
    todo = [(i, config.Prompt(f"p{i}", 1, 1), i * 0.1) for i in range(7)]
    shares = deal_arrivals(todo, cap=5, processes=2)
    assert [(slots, [i for i, _, _ in mine]) for slots, mine in shares] == [
        (3, [0, 2, 4, 6]), (2, [1, 3, 5])]
    assert shares[1][1][0][2] == pytest.approx(0.1)  # each keeps its arrival second
    with pytest.raises(config.BenchError, match="--processes 3 is more than the 2 requests"):
        deal_arrivals(todo, cap=2, processes=3)


def test_an_open_loop_client_process_keeps_the_arrival_seconds(stub_port_closed=9):
    from server.loadtest.bench.processes import READY, record_from_dict, spec
    cfg = config.BenchConfig(url=f"http://127.0.0.1:{stub_port_closed}", request_timeout_s=5,
                             request_rate=10.0)
    mine = [(3, config.Prompt("a", 1, 2), 0.2), (7, config.Prompt("b", 1, 2), 0.4)]
    child = subprocess.Popen([sys.executable, "-m", "server.loadtest.bench.processes"], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    child.stdin.write(spec(cfg, "m", 4, True, 2, mine) + "\n")
    child.stdin.flush()
    assert child.stderr.readline().strip() == READY
    out, err = child.communicate("go 30\n", timeout=60)
    assert child.returncode == 0, err
    records = sorted((record_from_dict(r) for r in json.loads(out)["records"]), key=lambda r: r.index)
    assert [r.index for r in records] == [3, 7] and all(r.error for r in records)
    assert [r.arrival_s for r in records] == pytest.approx([0.2, 0.4], abs=0.05)


# --- qa-load --arrival-rate -----------------------------------------------------------------

def test_users_arrive_as_a_seeded_poisson_process_and_the_last_ends_the_ramp():
    from server.loadtest.users.load import add_user_arguments, user_model
    from server.loadtest.users.model import UsersError
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=1)
    add_user_arguments(parser)
    model = user_model(parser.parse_args(["--users", "200", "--arrival-rate", "4", "--seed", "3"]), 200)
    times = [model.arrival_s(u) for u in range(200)]
    assert times == sorted(times) and times[-1] == pytest.approx(50.0) and model.ramp_s == 50.0
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.1)
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.25)  # not even
    again = user_model(parser.parse_args(["--users", "200", "--arrival-rate", "4", "--seed", "3"]), 200)
    assert [again.arrival_s(u) for u in range(200)] == times
    other = user_model(parser.parse_args(["--users", "200", "--arrival-rate", "4", "--seed", "4"]), 200)
    assert other.arrival_s(0) != times[0]
    even = user_model(parser.parse_args(["--users", "4", "--ramp-s", "8"]), 4)
    assert [even.arrival_s(u) for u in range(4)] == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(UsersError, match="--arrival-rate must be a positive"):
        user_model(parser.parse_args(["--users", "4", "--arrival-rate", "0"]), 4)


def test_the_status_line_names_an_open_level_by_its_rate():
    from server.loadtest.bench.run import level_name, progress_text
    assert level_name(config.BenchConfig(url="u", request_rate=4.0, uncapped=True), 400) == "4 req/s"
    assert level_name(config.BenchConfig(url="u", request_rate=4.0), 8) == "4 req/s (at most 8 in flight)"
    assert progress_text([], 10, 8, name=level_name(config.BenchConfig(url="u"), 8)).startswith(
        "concurrency 8 [")


def test_qa_load_refuses_an_arrival_rate_for_a_burst(capsys):
    from server import cli
    assert cli.main(["qa-load", "--sessions", "5", "--arrival-rate", "2"]) == 2
    assert "--arrival-rate spaces the arrivals of --users N" in capsys.readouterr().err


def test_the_app_modes_of_bench_refuse_a_request_rate(capsys):
    from server import cli
    assert cli.main(["bench", "--app-cost", "--url", "http://127.0.0.1:9", "--request-rate", "2"]) == 2
    assert "--request-rate is the engine bench's" in capsys.readouterr().err


async def test_an_open_level_from_two_client_processes_keeps_one_schedule(stub):
    """bench --request-rate --processes 2, for real (python -m ...), against the stub: every
    arrival is sent once, at its second of the common schedule."""
    from server.loadtest.bench import processes as bench_processes
    from server.loadtest.bench.workers import scheduled
    from server.progress import StatusLine
    stub["delay"] = 0.2
    cfg = config.BenchConfig(url=stub["url"], request_rate=20.0, burstiness=math.inf, uncapped=True,
                             processes=2, request_timeout_s=10)
    prompts = [config.Prompt(f"p{i}", 3, 2) for i in range(10)]
    records, duration, cpu_s = await bench_processes.run_level(
        cfg, "m", prompts, 10, True, time.monotonic() + 60, StatusLine("test"))
    assert sorted(r.index for r in records) == list(range(10)) and all(r.success for r in records)
    planned = {i: t for i, _, t in scheduled(cfg, prompts)}
    # Each process counts from its own "go": they all get it within a few milliseconds.
    assert all(abs(r.arrival_s - planned[r.index]) < 0.1 for r in records), [
        (r.index, r.arrival_s, planned[r.index]) for r in records]
    assert stub["most"] >= 3 and duration > 0.5 and cpu_s >= 0

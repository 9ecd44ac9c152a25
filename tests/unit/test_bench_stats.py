"""The bench's statistics and pure helpers, on hand-made records with figures worked out by hand."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from server.loadtest.bench import report
from server.loadtest.bench.run import BenchResult, Level
from server.loadtest.lib import config
from server.loadtest.lib import prompts
from server.loadtest.lib import stream
from server.loadtest.lib import target
from server.loadtest.lib.stats import (
    Distribution,
    RequestRecord,
    Slo,
    distribution_ms,
    meets_slo,
    percent_difference,
    summarize_level,
    tpot,
)

ROOT = Path(__file__).resolve().parents[2]


def rec(index=0, *, ttft=0.1, e2e=1.0, out=10, prompt=100, itl=(), ok=True) -> RequestRecord:
    return RequestRecord(index, 1, prompt, out, success=ok, ttft_s=ttft if ok else None,
                         e2e_s=e2e if ok else None, itl_s=list(itl), output_tokens=out if ok else 0,
                         error="" if ok else "HTTP 500: boom")


# --- per request ---------------------------------------------------------------

def test_tpot_is_decode_time_over_tokens_after_the_first():
    assert tpot(1.0, 0.1, 10) == pytest.approx(0.1)          # 0.9 s / 9 tokens
    assert tpot(0.5, 0.2, 4) == pytest.approx(0.1)           # 0.3 s / 3 tokens
    assert tpot(0.5, 0.2, 1) is None                          # no second token
    assert tpot(None, 0.2, 10) is None
    assert rec(ttft=0.25, e2e=2.25, out=5).tpot_s == pytest.approx(0.5)


def test_record_dict_carries_tpot_and_is_json():
    data = json.loads(json.dumps(rec(3, itl=(0.01, 0.02)).as_dict()))
    assert data["tpot_s"] == pytest.approx(0.1)
    assert data["itl_s"] == [0.01, 0.02] and data["index"] == 3 and data["success"] is True


# --- distributions ---------------------------------------------------------------

def test_distribution_mean_median_p99_in_ms():
    d = distribution_ms([0.010, 0.020, 0.030, 0.040])
    assert d.mean == pytest.approx(25.0)
    assert d.median == pytest.approx(25.0)
    # linear interpolation like numpy: rank 0.99 x 3 = 2.97 -> 30 + 0.97 x 10
    assert d.p99 == pytest.approx(39.7)


def test_distribution_of_nothing_is_none():
    assert distribution_ms([]) == Distribution(None, None, None)


def test_median_of_odd_count_is_the_middle_value():
    assert distribution_ms([0.005, 0.001, 0.100]).median == pytest.approx(5.0)


# --- SLOs and goodput --------------------------------------------------------------

def test_meets_slo_checks_every_limit_given():
    slo = Slo(ttft_ms=200, tpot_ms=50)
    assert meets_slo(rec(ttft=0.2, e2e=0.65, out=10), slo)         # TTFT 200, TPOT 50: on the limits
    assert not meets_slo(rec(ttft=0.201, e2e=0.2, out=1), slo)     # TTFT over
    assert not meets_slo(rec(ttft=0.1, e2e=0.56, out=10), slo)     # TPOT 51.1 ms over
    assert meets_slo(rec(ttft=0.1, e2e=9.0, out=1), slo)           # one token: TPOT counts as 0 (vLLM)
    assert not meets_slo(rec(ok=False), Slo())                    # a failed request is never good
    assert meets_slo(rec(ttft=5.0, e2e=50.0), Slo(tpot_ms=6000))   # only TPOT limited


def test_goodput_counts_requests_meeting_all_slos_per_second():
    records = [
        rec(0, ttft=0.05, e2e=0.5, out=10),     # TTFT 50, TPOT 50: good
        rec(1, ttft=0.30, e2e=0.75, out=10),    # TTFT 300: bad
        rec(2, ttft=0.05, e2e=2.0, out=10),     # TPOT 216.7: bad
        rec(3, ttft=0.05, e2e=0.05, out=1),     # one token: good
        rec(4, ok=False),                       # failed: bad
    ]
    s = summarize_level(records, duration_s=2.0, slo=Slo(ttft_ms=100, tpot_ms=100))
    assert s.goodput == pytest.approx(1.0)                 # 2 good / 2 s
    assert s.request_throughput == pytest.approx(2.0)      # 4 completed / 2 s
    assert s.slo.describe() == "TTFT <= 100 ms and TPOT <= 100 ms"


def test_without_slo_goodput_equals_request_throughput():
    s = summarize_level([rec(0), rec(1), rec(2, ok=False)], duration_s=4.0)
    assert s.goodput == s.request_throughput == pytest.approx(0.5)
    assert "no SLO" in s.slo.describe()


# --- throughput and aggregates ----------------------------------------------------------

def test_throughputs_divide_by_wall_time_and_skip_failures():
    records = [rec(0, out=10, prompt=100), rec(1, out=30, prompt=50), rec(2, ok=False, prompt=999)]
    s = summarize_level(records, duration_s=2.0)
    assert (s.requests, s.completed, s.failed) == (3, 2, 1)
    assert s.total_output_tokens == 40 and s.total_prompt_tokens == 150
    assert s.request_throughput == pytest.approx(1.0)
    assert s.output_throughput == pytest.approx(20.0)
    assert s.total_token_throughput == pytest.approx(95.0)


def test_itl_pools_the_gaps_of_every_request_and_tpot_skips_one_token_replies():
    records = [rec(0, ttft=0.1, e2e=0.4, out=4, itl=(0.1, 0.1, 0.1)),
               rec(1, ttft=0.1, e2e=0.1, out=1, itl=()),
               rec(2, ttft=0.2, e2e=0.5, out=2, itl=(0.3,))]
    s = summarize_level(records, duration_s=1.0)
    assert s.itl_ms.mean == pytest.approx(150.0)       # (100 + 100 + 100 + 300) / 4
    assert s.itl_ms.median == pytest.approx(100.0)
    assert s.tpot_ms.mean == pytest.approx(200.0)      # (100 + 300) / 2; none for 1 token
    assert s.ttft_ms.mean == pytest.approx(400 / 3)
    assert s.e2e_ms.median == pytest.approx(400.0)


def test_zero_duration_gives_zero_rates_not_an_error():
    s = summarize_level([], duration_s=0.0)
    assert s.request_throughput == s.goodput == 0.0


def test_percent_difference():
    assert percent_difference(105, 100) == pytest.approx(5.0)
    assert percent_difference(95, 100) == pytest.approx(-5.0)
    assert percent_difference(1, 0) is None


# --- the bench's pure helpers ----------------------------------------------------------------

def test_length_range_follows_vllm_range_ratio():
    assert config.length_range(128, 0.0) == (128, 128)
    assert config.length_range(100, 0.25) == (75, 125)
    assert config.length_range(1, 0.9) == (1, 2)


def test_sample_lengths_stay_in_range_and_repeat_with_the_seed():
    pairs = config.sample_lengths(200, 100, 50, 0.5, random.Random(1))
    assert all(50 <= p <= 150 and 25 <= o <= 75 for p, o in pairs)
    assert len({p for p, _ in pairs}) > 20                    # really spread
    assert pairs == config.sample_lengths(200, 100, 50, 0.5, random.Random(1))
    assert set(config.sample_lengths(5, 32, 16, 0.0, random.Random(0))) == {(32, 16)}


def test_usage_lengths_come_from_recorded_requests():
    records = [{"prompt_tokens": 300, "completion_tokens": 40},
               {"prompt_tokens": 0, "completion_tokens": 5},      # no prompt: skipped
               {"prompt_tokens": 90, "completion_tokens": 0}]     # empty reply: at least 1 token
    pairs = config.usage_lengths(records, 50, random.Random(0))
    assert set(pairs) == {(300, 40), (90, 1)}
    with pytest.raises(config.BenchError, match="no request"):
        config.usage_lengths([{"prompt_tokens": 0, "completion_tokens": 3}], 5, random.Random(0))


def test_check_fits_names_the_limit():
    config.check_fits([(900, 124)], 1024)
    with pytest.raises(config.BenchError,
                       match=r"1 of 2 requests need more than .*1024 tokens \(up to 1025\)"):
        config.check_fits([(900, 124), (1000, 25)], 1024)


def test_only_this_machine_is_loaded_unless_the_url_is_given():
    target.check_target("http://127.0.0.1:8000", explicit=False)
    target.check_target("http://localhost:8000", explicit=False)
    target.check_target("http://[::1]:8000", explicit=False)
    target.check_target("http://gpu-box:8000", explicit=True)
    with pytest.raises(config.BenchError, match="--url http://gpu-box:8000"):
        target.check_target("http://gpu-box:8000", explicit=False)


def test_vllm_comparison_pairs_figures_of_the_same_concurrency():
    ours = BenchResult("", {}, {}, [Level(c, summarize_level(
        [rec(0, ttft=0.02 * c, e2e=0.5, out=64)], duration_s=1.0)) for c in (1, 4)])
    theirs = {"max_concurrency": 4, "request_throughput": 0.8, "output_throughput": 64.0,
              "total_token_throughput": 200.0, "mean_ttft_ms": 100.0, "median_ttft_ms": 80.0,
              "mean_tpot_ms": 7.0, "mean_itl_ms": 7.0}             # no e2el: not compared
    rows = {r["figure"]: r for r in report.vllm_comparison(ours, theirs)}
    assert rows["request throughput (req/s)"]["difference_percent"] == pytest.approx(25.0)
    assert rows["mean TTFT (ms)"]["ours"] == pytest.approx(80.0)
    assert rows["mean TTFT (ms)"]["difference_percent"] == pytest.approx(-20.0)
    assert "mean E2E (ms)" not in rows


# --- a level over several client processes (bench --processes) ---------------------------

def test_a_level_is_dealt_to_processes_as_one_process_workers_would_take_it():
    from server.loadtest.bench.processes import deal
    from server.loadtest.lib.client_processes import even_shares
    assert even_shares(10, 4) == [3, 3, 2, 2] and even_shares(1000, 4) == [250] * 4
    prompts = [config.Prompt(f"p{i}", 8, 4) for i in range(10)]
    shares = deal(prompts, concurrency=4, processes=2)
    # Workers 0-1 in the first process, 2-3 in the second; worker w takes w, w+4, w+8.
    assert [(workers, [i for i, _ in mine]) for workers, mine in shares] == [
        (2, [0, 1, 4, 5, 8, 9]), (2, [2, 3, 6, 7])]
    assert all(p.text == f"p{i}" for _, mine in shares for i, p in mine)
    # More workers than prompts: only as many workers as prompts, still each prompt once.
    assert [len(mine) for _, mine in deal(prompts[:3], concurrency=8, processes=3)] == [1, 1, 1]
    with pytest.raises(config.BenchError, match="--processes 4 is more than the 3 requests in flight"):
        deal(prompts[:3], concurrency=8, processes=4)


def test_bench_refuses_more_processes_than_requests_in_flight(capsys):
    from server import cli
    assert cli.main(["bench", "--processes", "3", "--concurrency", "4,2"]) != 0
    assert "--processes 3 is more than --concurrency 2" in capsys.readouterr().err
    assert cli.main(["bench", "--processes", "17"]) != 0
    assert "--processes must be between 1 and 16 (got 17)" in capsys.readouterr().err


def test_a_client_process_sends_its_share_and_returns_its_records():
    """The client's side of the protocol, run for real (python -m ...), against a port where
    nothing listens: every request fails fast and is recorded with its error."""
    from server.loadtest.bench.processes import READY, record_from_dict, spec
    cfg = config.BenchConfig(url="http://127.0.0.1:9", api_key="sk-secret", request_timeout_s=5)
    mine = [(3, config.Prompt("a", 1, 2)), (7, config.Prompt("b", 1, 2))]
    child = subprocess.Popen([sys.executable, "-m", "server.loadtest.bench.processes"], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    child.stdin.write(spec(cfg, "m", 4, True, 1, mine) + "\n")
    child.stdin.flush()
    assert child.stderr.readline().strip() == READY
    out, err = child.communicate("go 30\n", timeout=60)
    assert child.returncode == 0, err
    result = json.loads(out)
    records = [record_from_dict(r) for r in result["records"]]
    assert [(r.index, r.concurrency, r.success) for r in records] == [(3, 4, False), (7, 4, False)]
    assert all(r.error for r in records) and result["cpu_s"] >= 0
    assert "sk-secret" not in out + err


# --- the streaming connection, against a scripted server ------------------------------------

def sse_response(*events, status="200 OK", close=False) -> bytes:
    """A chunked event-stream answer, one HTTP chunk per event, as uvicorn sends it."""
    data = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]
    head = (f"HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            + ("connection: close\r\n" if close else "") + "\r\n").encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in data) + b"0\r\n\r\n"


def json_response(status: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n").encode() + data


TOKENS = sse_response({"choices": [{"text": "a", "finish_reason": None}]},
                      {"choices": [{"text": "b", "finish_reason": None}]},
                      {"choices": [{"text": "c", "finish_reason": "length"}]},
                      {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}, "[DONE]")


class Scripted:
    """Answers each request with the next scripted response; "hang up" closes the
    connection after answering, "stall" sends the head of a stream and then nothing."""

    def __init__(self, responses):
        self.responses, self.connections, self.bodies = list(responses), 0, []
        self.hung_up = asyncio.Event()

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while self.responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                self.bodies.append(json.loads(await reader.readexactly(length)))
                response, action = self.responses.pop(0)
                writer.write(response)
                await writer.drain()
                if action == "hang up":
                    break
                if action == "stall":
                    await reader.read()  # until the client gives up
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.hung_up.set()


@pytest.fixture
async def scripted():
    servers = []

    async def start(*responses):
        script = Scripted(r if isinstance(r, tuple) else (r, None) for r in responses)
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
        script.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        servers.append(server)
        return script
    yield start
    for server in servers:
        server.close()


async def send_to(script, conn=None, body=None) -> RequestRecord:
    conn = conn or stream.StreamConnection(script.url, "k3y", idle_timeout_s=5)
    return await stream.send(conn, body or {"prompt": "hi"}, RequestRecord(0, 1, 7, 3))


async def test_send_reads_tokens_timings_and_usage(scripted):
    script = await scripted(TOKENS)
    record = await send_to(script, body={"prompt": "hello"})
    assert record.success and not record.error
    assert (record.output_tokens, record.output_tokens_from, record.prompt_tokens) == (3, "usage", 9)
    assert len(record.itl_s) == 2 and record.finish_reason == "length"
    assert 0 <= record.ttft_s <= record.e2e_s
    assert script.bodies == [{"prompt": "hello"}]


async def test_send_counts_chunks_when_the_server_sends_no_usage(scripted):
    script = await scripted(sse_response({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]},
                                         "[DONE]"))
    record = await send_to(script)
    assert record.success and (record.output_tokens, record.output_tokens_from) == (2, "chunks")


async def test_http_errors_and_errors_inside_the_stream_are_recorded(scripted):
    script = await scripted(
        json_response("400 Bad Request",
                      {"error": {"message": "This model's maximum context length is 1024 tokens."}}),
        sse_response({"choices": [{"text": "a"}]}, {"error": {"message": "engine died"}}),
        sse_response("[DONE]"), TOKENS)
    conn = stream.StreamConnection(script.url, None, idle_timeout_s=5)
    record = await send_to(script, conn)
    assert not record.success and record.error.startswith("HTTP 400: This model's maximum")
    record = await send_to(script, conn)
    assert not record.success and "engine died" in record.error
    record = await send_to(script, conn)
    assert not record.success and "without a token" in record.error
    assert (await send_to(script, conn)).success
    # A fully read error answer keeps the connection; a stream left half read does not.
    assert script.connections == 2


async def test_connections_are_kept_alive_and_replaced_when_the_server_hangs_up(scripted):
    script = await scripted(TOKENS, (TOKENS, "hang up"), TOKENS, TOKENS)
    conn = stream.StreamConnection(script.url, None, idle_timeout_s=5)
    results = [await send_to(script, conn) for _ in range(4)]
    assert all(r.success for r in results)
    assert script.connections == 2      # one reused for two requests, then one new after the hang-up


async def test_a_silent_server_times_out_and_a_cancelled_request_hangs_up(scripted):
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    script = await scripted((head, "stall"))
    record = await send_to(script, stream.StreamConnection(script.url, None, idle_timeout_s=0.3))
    assert not record.success and record.error == "no data for 0.3 s"
    script = await scripted((head, "stall"))
    task = asyncio.create_task(send_to(script))
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.wait_for(script.hung_up.wait(), 5)   # closing the stream is what aborts it in vLLM


def test_the_api_key_and_the_url_path_travel_with_each_request():
    conn = stream.StreamConnection("https://gpu-box:8443/llm", "s3cret", idle_timeout_s=1)
    assert conn.address == ("gpu-box", 8443) and conn.tls and conn.prefix == "/llm"
    assert "Authorization: Bearer s3cret\r\n" in conn.head and "Host: gpu-box:8443\r\n" in conn.head


def test_completion_body_sends_ignore_eos_and_sampling_only_when_asked():
    prompt = config.Prompt("hi", 1, 16)
    body = stream.completion_body("m", prompt, True, config.BenchConfig("u").sampling)
    assert body["ignore_eos"] is True and "temperature" not in body
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 16
    assert "top_p" not in body
    asked = config.BenchConfig("u", temperature=0.0, top_p=0.9).sampling
    body = stream.completion_body("m", prompt, False, asked)
    assert "ignore_eos" not in body and body["temperature"] == 0.0 and body["top_p"] == 0.9


# --- what the GPU machine needs -----------------------------------------------------------------

def test_bench_modules_import_without_the_app_environment():
    """bench and tune run where vLLM is but our app env is not: no matplotlib, openai or chainlit."""
    code = ("import sys, server.loadtest.bench.command, server.loadtest.lib.stats, server.loadtest.sweep.tune; "
            "print(sorted(m for m in ('matplotlib', 'openai', 'chainlit', 'numpy', 'app.engine.engine_client') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_prompts_that_share_their_first_cache_block_are_counted():
    shared_first_blocks = prompts.shared_first_blocks
    ids = list(range(100))
    assert shared_first_blocks(ids, [0, 16, 32, 50]) == 0
    assert shared_first_blocks(ids, [0, 16, 0, 16, 3]) == 2            # the same place twice
    assert shared_first_blocks([7] * 100, [0, 10, 20, 30]) == 3         # a corpus of one id
    assert shared_first_blocks(ids, [0, 1], block=1) == 0


def test_distinct_offsets_refuses_a_corpus_too_short_or_too_repetitive():
    distinct_offsets = prompts.distinct_offsets
    ids = list(range(1000))
    offsets = distinct_offsets(ids, 200, random.Random(1))
    assert offsets is not None and len(set(offsets)) == 200
    assert distinct_offsets(ids[:100], 200, random.Random(1)) is None     # places repeat
    assert distinct_offsets([0, 1] * 500, 50, random.Random(1)) is None   # two first blocks only
    assert distinct_offsets([], 50, random.Random(1)) is None               # a tokenizer that gives none


def test_the_engine_view_is_the_difference_of_two_metrics_readings():
    from server.metrics import parse_metrics
    def reading(requests: int, ttft_s: float, e2e_s: float, queue_s: float, queried: int, hits: int):
        return parse_metrics("\n".join([
            f"vllm:time_to_first_token_seconds_sum {ttft_s}", f"vllm:time_to_first_token_seconds_count {requests}",
            f"vllm:e2e_request_latency_seconds_sum {e2e_s}", f"vllm:e2e_request_latency_seconds_count {requests}",
            f"vllm:request_queue_time_seconds_sum {queue_s}", f"vllm:request_queue_time_seconds_count {requests}",
            f"vllm:prefix_cache_queries_total {queried}", f"vllm:prefix_cache_hits_total {hits}", ""]))
    view = summarize_level([], duration_s=1.0)
    target.add_server_view(view, reading(5, 1.0, 10.0, 0.0, 1000, 0), reading(9, 1.2, 18.0, 0.04, 2000, 100))
    assert view.server_ttft_ms_mean == pytest.approx(50.0)   # 0.2 s over 4 requests
    assert view.server_e2e_ms_mean == pytest.approx(2000.0)
    assert view.server_queue_ms_mean == pytest.approx(10.0)
    assert view.prefix_cache_hit_rate == pytest.approx(0.1)
    other = summarize_level([], duration_s=1.0)
    target.add_server_view(other, None, reading(1, 1, 1, 0, 1, 0))   # not vLLM: nothing to add
    assert (other.prefix_cache_hit_rate, other.server_ttft_ms_mean) == (None, None)


def test_the_table_shows_the_engine_view_beside_the_clients_figures():
    summary = summarize_level([rec(0, ttft=0.1, e2e=1.0, out=10)], duration_s=1.0)
    summary.client_cpu_fraction, summary.server_ttft_ms_mean = 0.1, 40.0
    summary.server_e2e_ms_mean, summary.server_queue_ms_mean = 900.0, 2.5
    text = report.render(BenchResult("", {}, {}, [Level(4, summary)]))
    row = next(line for line in text.splitlines() if line.lstrip().startswith("4 ") and "/" in line
               and "|" not in line)
    assert re.findall(r"[\d.]+", row) == ["4", "40.0", "100.0", "2.5", "900.0", "1000.0"]
    # Without the engine's counters (another server) there is no such table.
    summary.server_ttft_ms_mean = None
    assert "engine's own view" not in report.render(BenchResult("", {}, {}, [Level(4, summary)]))


def test_prefix_cache_hit_rate_between_two_readings():
    hit_rate = target.hit_rate
    assert hit_rate((1000, 100), (3000, 600)) == 0.25
    assert hit_rate(None, (3000, 600)) is None and hit_rate((1000, 100), None) is None
    assert hit_rate((1000, 100), (1000, 100)) is None                    # nothing was asked


def test_speculative_acceptance_is_part_of_the_engine_view_and_the_table():
    from server.metrics import parse_metrics
    def reading(drafts: int, drafted: int, accepted: int):
        return parse_metrics(f"vllm:spec_decode_num_drafts_total {drafts}\n"
                             f"vllm:spec_decode_num_draft_tokens_total {drafted}\n"
                             f"vllm:spec_decode_num_accepted_tokens_total {accepted}\n")
    summary = summarize_level([rec(0, ttft=0.1, e2e=1.0, out=10)], duration_s=1.0)
    target.add_server_view(summary, reading(9, 24, 18), reading(29, 104, 38))
    assert summary.spec_acceptance_rate == pytest.approx(0.25)     # 20 of 80 drafted
    assert summary.spec_acceptance_length == pytest.approx(2.0)    # 1 + 20 / 20 drafts
    text = report.render(BenchResult("", {}, {}, [Level(1, summary)]))
    assert ("speculative decoding at concurrency 1: 25.0% of draft tokens accepted, 2.00 tokens "
            "per drafting step") in text
    plain = summarize_level([rec(0, ttft=0.1, e2e=1.0, out=10)], duration_s=1.0)
    target.add_server_view(plain, reading(0, 0, 0), reading(0, 0, 0))
    assert "speculative" not in report.render(BenchResult("", {}, {}, [Level(1, plain)]))

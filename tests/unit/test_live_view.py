"""The live view for presenters: its figures, its routes, and the page in a real Chromium."""

from __future__ import annotations


import pytest

from app.engine.engine_client import ReplyStats
from app.engine.recent_replies import MIN_RATE_INTERVAL_S, RecentReplies, Reading
from app.pages.live_page import DATA, choose, page_html
from app.texts import lang_of
from server.metrics import EngineMetrics


def metrics(generated: int, running=1, waiting=0, kv=0.25) -> EngineMetrics:
    return EngineMetrics(kv_cache_usage=kv, running=running, waiting=waiting, preemptions=0,
                         kv_cache_tokens=1000, prompt_tokens=10, generation_tokens=generated)


def test_rates_come_from_two_readings_and_close_readings_reuse_the_last():
    live = RecentReplies()
    assert live.rate("engine", 100, now=10.0) == 0.0           # one reading: no rate yet
    assert live.rate("engine", 300, now=12.0) == 100.0         # 200 tokens in 2 s
    assert live.rate("engine", 310, now=12.0 + MIN_RATE_INTERVAL_S / 2) == 100.0
    assert live.rate("engine", 5, now=20.0) == 0.0             # the counter went back: a restart


async def reply(stats, n, per_read=1):
    """A reply of ``n`` pieces whose first came 250 ms after it was asked for, ``per_read`` of
    them joined in each text it yields (as stream_reply joins the pieces of one read)."""
    stats.first_token_at = stats.started + 0.25
    for i in range(0, n, per_read):
        stats.pieces += min(per_read, n - i)
        yield "".join(f"w{k} " for k in range(i, min(n, i + per_read)))
    stats.finished_at, stats.completion_tokens = stats.first_token_at + 1.0, n


async def test_track_counts_the_servers_pieces_not_the_texts_passed_up():
    live, stats = RecentReplies(), ReplyStats(started=100.0)
    texts = [text async for text in live.track(reply(stats, 10, per_read=4), stats)]
    assert len(texts) == 3 and live.pieces == 10 and "".join(texts).split() == [f"w{i}" for i in range(10)]


async def test_track_counts_pieces_and_records_each_reply_that_began():
    live = RecentReplies()
    stats = ReplyStats(started=100.0)
    seen = []
    async for piece in live.track(reply(stats, 11), stats):
        seen.append(piece)
        assert live.streaming == 1
    assert len(seen) == 11 and live.pieces == 11 and live.streaming == 0
    last = live.replies[-1]
    assert (last.ttft_ms, last.tokens_per_s, last.tokens) == (250.0, 10.0, 11)

    stats = ReplyStats(started=200.0)
    stopped = live.track(reply(stats, 50), stats)  # Stop after 3 pieces
    async for _ in stopped:
        if live.pieces == 14:
            break
    await stopped.aclose()
    assert live.streaming == 0 and live.recorded == 2
    assert (live.replies[-1].ttft_ms, live.replies[-1].tokens_per_s) == (250.0, None)

    failed = ReplyStats()

    async def refused(stats):  # the server refused: no first token, nothing to record
        raise RuntimeError("refused")
        yield ""
    with pytest.raises(RuntimeError):
        async for _ in live.track(refused(failed), failed):
            pass
    assert live.streaming == 0 and live.recorded == 2


def test_snapshot_uses_the_engine_where_it_has_metrics_else_the_app():
    live = RecentReplies()
    live.snapshot(10.0, [Reading("m", metrics(1000))], chats=2)
    engine = live.snapshot(11.0, [Reading("m", metrics(1400, running=3, waiting=2))], chats=2)
    assert (engine["tokens_per_s"], engine["running"], engine["waiting"]) == (400.0, 3, 2)
    assert engine["kv_cache_pct"] == 25.0 and engine["metrics"] and engine["chats"] == 2
    live.tallies["m"].pieces = 50
    live.snapshot(20.0, [Reading("m", None)], chats=1)
    live.tallies["m"].pieces = 80
    plain = live.snapshot(22.0, [Reading("m", None)], chats=1)
    assert plain["tokens_per_s"] == 15.0 and not plain["metrics"]
    assert plain["running"] is None and plain["kv_cache_pct"] is None


def test_each_model_has_its_own_rate_the_top_sums_them_and_shows_the_fullest_kv():
    live = RecentReplies()
    live.snapshot(10.0, [Reading("a", metrics(1000)), Reading("b", metrics(50))], chats=3)
    both = live.snapshot(12.0, [Reading("a", metrics(1200, running=2, waiting=1, kv=0.1)),
                                Reading("b", metrics(850, running=5, waiting=0, kv=0.6))], chats=3)
    a, b = both["models"]
    assert (a["name"], a["tokens_per_s"], a["running"], a["waiting"], a["kv_cache_pct"]) == ("a", 100.0, 2, 1, 10.0)
    assert (b["name"], b["tokens_per_s"], b["running"], b["waiting"], b["kv_cache_pct"]) == ("b", 400.0, 5, 0, 60.0)
    assert (both["tokens_per_s"], both["running"], both["waiting"], both["kv_cache_pct"]) == (500.0, 7, 1, 60.0)
    assert both["metrics"] and a["engine_up"] and b["engine_up"]
    # B's engine stops answering: A's figures stand, B has none, the top is A's.
    down = live.snapshot(14.0, [Reading("a", metrics(1400, running=1, kv=0.2)),
                                Reading("b", None, engine_up=False)], chats=3)
    a, b = down["models"]
    assert a["engine_up"] and a["tokens_per_s"] == 100.0 and a["kv_cache_pct"] == 20.0
    assert not b["engine_up"] and not b["metrics"] and b["running"] is None and b["kv_cache_pct"] is None
    assert (down["tokens_per_s"], down["running"], down["kv_cache_pct"]) == (100.0, 1, 20.0)


async def test_replies_name_their_model_and_one_models_figures_have_only_its_own():
    live = RecentReplies()
    for model in ("a", "b", "b"):
        stats = ReplyStats(started=0.0)
        async for _ in live.track(reply(stats, 3), stats, model):
            pass
    every = live.snapshot(5.0, [Reading("a", None), Reading("b", None)], chats=0)
    assert [r["model"] for r in every["replies"]] == ["a", "b", "b"] and every["replies_total"] == 3
    only_b = live.snapshot(5.0, [Reading("b", None)], chats=0, only=True)
    assert [r["model"] for r in only_b["replies"]] == ["b", "b"] and only_b["replies_total"] == 2
    assert [m["name"] for m in only_b["models"]] == ["b"] and live.pieces == 9


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("asked", ["../../etc", "<script>alert(1)</script>", "org/small", "small ",
                                   "http://127.0.0.1:9101", "SMALL"])
def test_only_a_served_name_shows_one_model_anything_else_every_model_and_a_notice(asked):
    from tests.support.plans import engines
    several = engines(models="/models/big:8192,org/small:2048", engine_port=9100).all
    assert choose(several, "small") == ([several[1]], False)
    assert choose(several, "") == (several, False)
    assert choose(several, asked) == (several, True)
    page = page_html("en", model="small")
    assert '"data": "/live/data?model=small"' in page and '"unknown_model": false' in page
    forged = page_html("en", unknown=True)
    assert f'"data": "{DATA}"' in forged and '"unknown_model": true' in forged
    assert "No model of that name is served here" in forged
    assert "显示全部模型" in page_html("zh", unknown=True)


@pytest.mark.parametrize("accept, lang, title", [("zh-CN,zh;q=0.9,en;q=0.8", "zh-CN", "实时面板"),
                                                 ("en-US,en;q=0.9", "en", "ernie-chat live"),
                                                 (None, "en", "ernie-chat live")])
def test_the_page_speaks_the_browsers_language(accept, lang, title):
    html = page_html(lang_of(accept))
    assert f'<html lang="{lang}">' in html and title in html
    assert "__" not in html, "a placeholder was left in the page"

"""The app's client code against a REAL vLLM (CPU build) serving the demo model."""

from __future__ import annotations

import asyncio
import http.client
import time
from contextlib import aclosing

import httpx
import pytest

from app.engine import engine_client as ec
# Imported here, not in a test: Chainlit writes a .chainlit/ folder into the working
# directory it is first imported from, and the tests run in tests/.
from app.conversation.chat_settings import ChatParams, sampling_extra
from app.engine.continuation import continuation_request
from app.conversation.history import Conversation, TooLong, fit
from app.engine.server_info import probe
from tests.support.settings import TEST_MAX_MODEL_LEN
from tests.support.metrics import metric_async
from tests.support.chat import ask


@pytest.fixture
async def client(engine):
    settings, _ = engine
    client = ec.make_client(settings)
    yield client
    await client.close()


@pytest.fixture
async def counter(engine):
    settings, _ = engine
    http = httpx.AsyncClient(timeout=10)

    async def count(messages):
        return await ec.count_tokens(http, settings.engine_base_url, settings.served_model_name,
                                     messages)
    yield count
    await http.aclose()


async def test_engine_reports_model_and_window(engine, client):
    settings, stack = engine
    async with httpx.AsyncClient(timeout=10) as http:
        server = await probe(client, http, settings)
    assert server.model == settings.served_model_name
    assert server.window == TEST_MAX_MODEL_LEN == stack.info.max_model_len
    assert (server.kind, server.window_source, server.counting) == ("vllm", "server", "vllm")
    assert (server.root and stack.info.is_demo)


async def test_streamed_multi_turn_chat(engine, client, counter):
    settings, _ = engine
    conversation = Conversation("You are a helpful assistant.")
    first = conversation.messages("今天天气怎么样？")
    pieces, stats = await ask(client, settings, first, extra_body={"ignore_eos": True})
    # Streamed, not at once; on busy cores vLLM merges the outputs the API server has not sent
    # yet, so a piece may carry many tokens (4 pieces for 48 tokens in one full run).
    assert len(pieces) > 1, "the reply must arrive in pieces, not at once"
    assert stats.completion_tokens == 48 and stats.finish_reason == "length"
    assert stats.prompt_tokens == await counter(first), "/tokenize must agree with usage"
    assert stats.ttft_s is not None and stats.tokens_per_s and stats.tokens_per_s > 0
    conversation.add("今天天气怎么样？", "".join(pieces))

    second = conversation.messages("And tomorrow?")
    assert second[2] == {"role": "assistant", "content": "".join(pieces)}
    pieces2, stats2 = await ask(client, settings, second)
    assert "".join(pieces2).strip()
    assert stats2.prompt_tokens > stats.prompt_tokens + stats.completion_tokens - 5


async def test_fit_keeps_request_inside_real_window(engine, client, counter):
    settings, _ = engine
    conversation = Conversation("You are a helpful assistant.")
    for i in range(48):
        conversation.add(f"Question {i}: " + "tell me about the weather " * 12,
                         f"Answer {i}: " + "it is sunny and warm today " * 12)
    fitted = await fit(conversation, "Last question?", counter, TEST_MAX_MODEL_LEN, 200)
    assert fitted.dropped_turns > 0
    assert fitted.prompt_tokens + fitted.max_tokens <= TEST_MAX_MODEL_LEN
    assert fitted.messages[0]["role"] == "system" and fitted.messages[-1]["content"] == "Last question?"
    # Keeping one more turn would not have fitted: the fewest turns were dropped.
    assert await counter(conversation.messages("Last question?", fitted.dropped_turns - 1)) + 200 \
        > TEST_MAX_MODEL_LEN
    pieces, stats = await ask(client, settings, fitted.messages, max_tokens=fitted.max_tokens)
    assert stats.prompt_tokens == fitted.prompt_tokens


async def test_single_message_longer_than_window_is_refused_before_sending(counter):
    with pytest.raises(TooLong) as info:
        await fit(Conversation("sys"), "weather " * 6000, counter, TEST_MAX_MODEL_LEN, 64)
    assert info.value.tokens > TEST_MAX_MODEL_LEN


async def test_cancelling_the_stream_aborts_generation_on_the_server(engine, client):
    """What the Stop button does: the task is cancelled; vLLM must stop generating."""
    settings, _ = engine
    base = settings.engine_base_url
    got_tokens, never = asyncio.Event(), asyncio.Event()

    async def long_reply():
        pieces = ec.stream_reply(client, settings.served_model_name,
                                 [{"role": "user", "content": "Tell me a long story."}],
                                 ec.ReplyStats(), temperature=0.7, top_p=0.9,
                                 max_tokens=TEST_MAX_MODEL_LEN - 64, extra_body={"ignore_eos": True})
        async with aclosing(pieces):  # as app.stream_answer does
            async for _ in pieces:
                got_tokens.set()
                # Park in the loop body, like the app awaiting the browser, so that the
                # cancel lands mid-stream (a fast reader could drain the whole reply first).
                await never.wait()

    generated_before = await metric_async(base, "vllm:generation_tokens_total")
    task = asyncio.create_task(long_reply())
    await asyncio.wait_for(got_tokens.wait(), 60)
    # No /metrics read before the cancel: on 2 busy cores vLLM can answer it only after
    # the whole reply is generated, which would hide what the cancel does.
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while await metric_async(base, "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline, "vLLM kept generating after the stream was closed"
        await asyncio.sleep(0.05)
    # vLLM does not count client aborts in request_success_total; the token counter
    # shows the reply was cut short instead of running to its ~4,000 tokens.
    generated = await metric_async(base, "vllm:generation_tokens_total") - generated_before
    assert generated < (TEST_MAX_MODEL_LEN - 64) / 2, f"{generated} tokens generated after Stop"


async def test_the_same_seed_gives_the_same_reply(engine, client):
    """QA's reproducible replies: the panel's seed goes to vLLM with the request (extra_body)."""
    settings, _ = engine
    messages = [{"role": "user", "content": "Tell me about the weather."}]

    async def reply(seed):
        params = ChatParams("", temperature=1.0, top_p=1.0, max_tokens=32, seed=seed)
        stats = ec.ReplyStats()
        pieces = [p async for p in ec.stream_reply(
            client, settings.served_model_name, messages, stats, temperature=params.temperature,
            top_p=params.top_p, max_tokens=params.max_tokens, extra_body=sampling_extra(params, True))]
        assert stats.completion_tokens == 32
        return "".join(pieces)

    first, again, other = await reply(1234), await reply(1234), await reply(4321)
    assert first == again, "the same seed, prompt and settings gave different replies"
    assert first != other, "a different seed gave the same reply"
    unseeded = {await reply(None) for _ in range(3)}
    assert len(unseeded) > 1, "without a seed the replies should differ (temperature 1.0)"


async def test_prompt_too_long_error_is_classified(engine, client):
    settings, _ = engine
    with pytest.raises(Exception) as info:
        await ask(client, settings, [{"role": "user", "content": "weather " * 6000}])
    assert ec.error_kind(info.value) == "too_long"


def test_live_metrics_read_the_real_engine(engine):
    """`ernie-chat status` and the chat's /status read these figures from /metrics."""
    from server.metrics import fetch_metrics
    settings, stack = engine
    metrics = fetch_metrics(settings.engine_base_url)
    assert metrics.running == 0 and metrics.waiting == 0
    assert 0.0 <= metrics.kv_cache_usage <= 1.0
    assert metrics.generation_tokens > 0  # earlier tests in this module generated text
    assert "KV cache" in metrics.summary() and "waiting" in metrics.summary()


def test_the_engine_up_starts_keeps_an_idle_connection_past_vllms_own_5_s(engine):
    """The app keeps idle connections for settings.app_keepalive_s (60 s here), so the engine
    must not close them first: a chat's next message after a reader's pause reuses one."""
    settings, _ = engine
    host, port = settings.engine_base_url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        sockets = []
        for pause_s in (0, 7):
            time.sleep(pause_s)
            # On a connection the server closed meanwhile this raises RemoteDisconnected.
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            assert response.status == 200
            sockets.append(connection.sock)
        assert sockets[0] is sockets[1], "the second request needed a new connection"
    finally:
        connection.close()


async def test_a_cut_reply_continues_from_its_text_with_the_models_template(engine, client):
    """continue_final_message with the demo model's chat template: the text shown so far is
    the start of the assistant's turn (no end of turn after it), so greedy decoding goes on
    exactly where the whole reply went, and the token counts add up."""
    settings, _ = engine
    messages = [{"role": "user", "content": "Tell me a long story about the sea."}]
    extra = {"ignore_eos": True, **ec.LIVE_USAGE}

    async def greedy(messages, max_tokens, extra_body):
        stats, pieces, counts = ec.ReplyStats(), [], []
        async for piece in ec.stream_reply(client, settings.served_model_name, messages, stats,
                                           temperature=0.0, top_p=1.0, max_tokens=max_tokens,
                                           extra_body=extra_body):
            pieces.append(piece)
            counts.append(stats.completion_tokens)  # the live count, as the chat reads it at a cut
        return pieces, counts, stats

    async def continued_prompt(shown):
        """The prompt's tokens when the template renders ``shown`` as the open assistant turn."""
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{settings.engine_base_url}/tokenize", json={
                "model": settings.served_model_name, "add_generation_prompt": False,
                "continue_final_message": True,
                "messages": [*messages, {"role": "assistant", "content": shown}]})
        return answer.json()["count"]

    whole, counts, whole_stats = await greedy(messages, 40, extra)
    assert whole_stats.completion_tokens == 40 and counts[-1] == 40
    text = "".join(whole)
    # The random demo model may write tokens that its text tokenizes differently (two tokens
    # where one would do), and which it writes depends on the CPU's arithmetic. Greedy
    # decoding goes on identically only from a cut whose text tokenizes back to its tokens.
    # The cuts are made by max_tokens, not at the stream's pieces: on a busy machine vLLM
    # hands several tokens over in one piece (a whole reply of 40 came in two once).
    for produced in range(20, 0, -1):
        start, start_counts, _ = await greedy(messages, produced, extra)
        shown = "".join(start)
        assert start_counts[-1] == produced
        # A cut inside a character holds its bytes back: not a start of the text then.
        if text.startswith(shown) and (
                await continued_prompt(shown) == whole_stats.prompt_tokens + produced):
            break
    else:
        pytest.fail(f"no start of {text!r} tokenizes back to the tokens it came from")
    request = continuation_request(messages, shown, 40, produced, extra)
    rest, _, rest_stats = await greedy(request.messages, request.max_tokens, request.extra_body)
    assert produced + rest_stats.completion_tokens == 40
    assert rest_stats.prompt_tokens == whole_stats.prompt_tokens + produced
    assert shown + "".join(rest) == text

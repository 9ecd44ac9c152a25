"""app/conversation/prompt_budget.py's bounds against the REAL engine's /tokenize."""

from __future__ import annotations

import asyncio
import random

import httpx

from app.engine import engine_client as ec
from app.conversation.history import Conversation
from app.conversation.prompt_budget import PromptBudget, Reply, reply_bound, template_overhead, text_bound
from tests.support.settings import TEST_MAX_MODEL_LEN


async def test_real_tokenizer_bounds_are_above_the_exact_length(engine):
    settings, _ = engine
    rng = random.Random(3)
    pieces = ["Hello", " world", "，", "今天天气", "怎么样", "🙂", " naïve café", "\n", "  ", "1234"]
    text = lambda n: "".join(rng.choice(pieces) for _ in range(n))
    async with httpx.AsyncClient(timeout=30) as http:
        async def count(messages):
            return await ec.count_tokens(http, settings.engine_base_url, settings.served_model_name,
                                         messages)
        overhead = await template_overhead(count)
        budget, conversation = PromptBudget({}), Conversation("You are a helpful assistant.")
        for turn in range(40):
            fitted = await budget.fit(conversation, text(rng.randint(1, 30)), count,
                                      settings.served_model_name, TEST_MAX_MODEL_LEN, 256)
            exact = await count(fitted.messages)
            assert exact <= fitted.prompt_tokens, (turn, exact, fitted.prompt_tokens)
            assert exact + fitted.max_tokens <= TEST_MAX_MODEL_LEN
            budget.sent(exact)
            conversation.add(fitted.messages[-1]["content"], text(rng.randint(20, 120)))
    assert 0 < overhead.per_message < 40 and 0 < overhead.one < 100
    assert budget.exact_fits > 1, "40 turns must reach the window and count exactly there"
    assert budget.exact_fits < 35, "far from the window the bound must have been enough"


async def test_real_replies_read_back_within_their_generated_tokens(engine):
    """Sampled replies of the demo model (random weights: odd splits and byte-level pieces
    more often than a trained model's), read back in the next prompt: each within
    ``reply_bound`` of its usage, and a chat whose replies' bytes would need the exact count
    gets by on the bound."""
    settings, _ = engine
    model, window, reply_tokens = settings.served_model_name, 1024, 96
    async with httpx.AsyncClient(timeout=120) as http:
        async def count(messages):
            return await ec.count_tokens(http, settings.engine_base_url, model, messages)

        async def answer(messages, seed):
            response = await http.post(f"{settings.engine_base_url}/v1/chat/completions", json={
                "model": model, "messages": messages, "max_tokens": reply_tokens, "seed": seed,
                "temperature": 1.0, "ignore_eos": True})
            response.raise_for_status()
            body = response.json()
            return body["choices"][0]["message"]["content"], body["usage"]

        overheads = {}

        async def chat(seed):
            budget, conversation, ratios = PromptBudget(overheads), Conversation("Be brief."), []
            for turn in range(3):
                user = f"question {seed}-{turn}"
                fitted = await budget.fit(conversation, user, count, model, window, reply_tokens)
                exact = await count(fitted.messages)
                assert exact <= fitted.prompt_tokens and exact + fitted.max_tokens <= window, (seed, turn)
                text, usage = await answer(fitted.messages, seed * 10 + turn)
                assert usage["prompt_tokens"] == exact
                reply = Reply(text, usage["completion_tokens"])
                read_back = (await count([{"role": "user", "content": user}, {"role": "assistant", "content": text}])
                             - await count([{"role": "user", "content": user}]))
                assert read_back <= reply_bound(reply), (seed, turn, read_back, reply, text)
                ratios.append(read_back / reply.tokens)
                conversation.add(user, text)
                budget.sent(usage["prompt_tokens"], reply)
            return budget, conversation, ratios

        chats = await asyncio.gather(*(chat(seed) for seed in range(8)))
        per_message = (await template_overhead(count)).per_message
    bytes_only = [text_bound(c.messages("next"), per_message) for _, c, _ in chats]
    ratios = [r for _, _, rs in chats for r in rs]
    print(f"reply read back / generated tokens: min {min(ratios):.2f}, max {max(ratios):.2f}; "
          f"bytes-only bound of a 4th prompt {min(bytes_only)}-{max(bytes_only)} tokens")
    assert max(bytes_only) + reply_tokens > window, "the replies' bytes alone must reach the window"
    assert all(budget.exact_fits == 0 for budget, _, _ in chats)

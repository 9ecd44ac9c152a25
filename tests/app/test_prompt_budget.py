"""app/conversation/prompt_budget.py's bounds against the REAL engine's /tokenize."""

from __future__ import annotations

import random

import httpx

from app.engine import engine_client as ec
from app.conversation.history import Conversation
from app.conversation.prompt_budget import PromptBudget, template_overhead
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

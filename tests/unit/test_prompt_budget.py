"""app/conversation/prompt_budget.py: a chat's next prompt bounded from its last one, exact near the limit.

The first tests count with a stand-in tokenizer (two bytes per token plus a template of
three tokens per message and two at the end), so the arithmetic can be followed; the
last one asks the REAL engine's /tokenize, on text in three scripts, that every bound is
above the true length and that no request could exceed the window.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from app.conversation.history import Conversation, fit
from app.conversation.prompt_budget import (SLACK_PER_MESSAGE, PromptBudget, Template, first_bound, grown_bound,
                                            text_bound)

PER_MESSAGE, AT_END = 3, 2


class HalfBytes:
    """Two UTF-8 bytes per token, three per message, two at the end; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict]) -> int:
        self.calls += 1
        return AT_END + sum(math.ceil(len(m["content"].encode()) / 2) + PER_MESSAGE for m in messages)


async def chat(budget: PromptBudget, count, conversation: Conversation, turns: list[tuple[str, str]],
               window: int, max_tokens: int):
    """Ask each user text and record the given reply; yield each fitted request."""
    for user, reply in turns:
        fitted = await budget.fit(conversation, user, count, "m", window, max_tokens)
        yield fitted
        conversation.add(user, reply)
        budget.sent(await HalfBytes()(fitted.messages))  # the engine's usage: exact


async def test_a_chat_far_from_the_limit_asks_nothing():
    count, budget = HalfBytes(), PromptBudget({})
    turns = [(f"question {i}", "an answer of some length " * 4) for i in range(6)]
    fitted = [f async for f in chat(budget, count, Conversation("Be brief."), turns, 4096, 256)]
    # Two counts to measure the template once, then none, not even for the first message.
    assert count.calls == 2 and budget.exact_fits == 0
    for f in fitted:
        exact = await HalfBytes()(f.messages)
        assert exact <= f.prompt_tokens and f.prompt_tokens + f.max_tokens <= 4096
        assert f.dropped_turns == 0 and f.max_tokens == 256


async def test_the_template_is_measured_once_per_model_for_every_chat():
    overheads, count = {}, HalfBytes()
    for _ in range(3):
        budget = PromptBudget(overheads)
        async for _ in chat(budget, count, Conversation(""), [("a", "b"), ("c", "d")], 4096, 64):
            pass
    assert count.calls == 2  # one measurement for the three chats
    one = AT_END + math.ceil(1 / 2) + PER_MESSAGE
    measured = await overheads["m"].get(count)  # kept: asks nothing more
    assert measured == Template(PER_MESSAGE + math.ceil(1 / 2) + 4, one)  # (three - one) / 2 + slack
    assert count.calls == 2


async def test_a_crowds_first_messages_wait_for_one_measurement():
    overheads, count = {}, HalfBytes()
    budgets = [PromptBudget(overheads) for _ in range(50)]
    await asyncio.gather(*(b.fit(Conversation(""), "hi", count, "m", 4096, 64) for b in budgets))
    assert count.calls == 2 and all(b.exact_fits == 0 for b in budgets)


async def test_a_first_message_near_the_limit_is_counted_exactly():
    count, budget = HalfBytes(), PromptBudget({})
    long = "word " * 300  # 1,500 bytes: the bound says 1,500+, the count 750 + the template
    fitted = await budget.fit(Conversation("Be brief."), long, count, "m", 1200, 256)
    assert budget.exact_fits == 1
    assert fitted.prompt_tokens == await HalfBytes()(fitted.messages)
    assert fitted.prompt_tokens + fitted.max_tokens <= 1200


async def test_near_the_limit_the_exact_fit_drops_turns_as_before():
    count, budget = HalfBytes(), PromptBudget({})
    window, max_tokens = 400, 100
    turns = [(f"question number {i}", "a long answer " * 12) for i in range(10)]
    conversation = Conversation("Be brief.")
    reference = Conversation("Be brief.")
    async for fitted in chat(budget, count, conversation, turns, window, max_tokens):
        expected = await fit(reference, fitted.messages[-1]["content"], HalfBytes(), window, max_tokens)
        exact = await HalfBytes()(fitted.messages)
        assert exact + fitted.max_tokens <= window, "a request must never exceed the window"
        assert fitted.dropped_turns >= expected.dropped_turns
        reference.add(fitted.messages[-1]["content"], "a long answer " * 12)
    assert budget.exact_fits > 1 and conversation.turns


@pytest.mark.parametrize("change", ["system prompt", "rewound"])
async def test_a_history_that_did_not_only_grow_is_counted_exactly(change):
    count, budget = HalfBytes(), PromptBudget({})
    conversation = Conversation("Be brief.")
    async for _ in chat(budget, count, conversation, [("a", "b"), ("c", "d")], 4096, 64):
        pass
    assert budget.exact_fits == 0
    if change == "system prompt":
        conversation.system_prompt = "Be verbose."
    else:
        del conversation.turns[-1]
    await budget.fit(conversation, "e", count, "m", 4096, 64)
    assert budget.exact_fits == 1


def test_the_bound_holds_only_for_a_prompt_that_grew_from_the_known_one():
    from app.conversation.prompt_budget import Known
    known = Known([{"role": "user", "content": "hi"}], 10, 0)
    grown = known.messages + [{"role": "assistant", "content": "你好"}, {"role": "user", "content": "ok"}]
    assert grown_bound(known, grown, 5) == 10 + (6 + 5) + (2 + 5)
    assert text_bound(grown[1:], 5) == 18
    assert grown_bound(known, [{"role": "user", "content": "other"}], 5) is None
    assert grown_bound(None, grown, 5) is None
    assert first_bound(grown, Template(5, 7)) == 7 + (2 + 5) + (6 + 5) + (2 + 5)


async def test_the_estimate_for_a_reservation_asks_nothing_and_grows_from_the_last_prompt():
    """What admission reserves for a prompt (app/conversation/admission.py): its text's bytes at
    first, then the last exact prompt plus what came since; never a /tokenize call."""
    count, budget, conversation = HalfBytes(), PromptBudget({}), Conversation("Be brief.")
    first = budget.estimate(conversation, "héllo")
    assert first == len("Be brief.") + len("héllo".encode()) + 2 * SLACK_PER_MESSAGE
    assert first >= await HalfBytes()(conversation.messages("héllo"))
    async for _ in chat(budget, count, conversation, [("héllo", "an answer")], 4096, 64):
        pass
    calls = count.calls
    later = budget.estimate(conversation, "and more")
    assert later == budget.known.tokens + len("an answer") + len("and more") + 2 * SLACK_PER_MESSAGE
    assert later >= await HalfBytes()(conversation.messages("and more")) and count.calls == calls

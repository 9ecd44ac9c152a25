"""app/conversation/history.py: fitting the conversation into the context window.

The token counter here is a fake (words + a fixed overhead per message), so the
arithmetic is easy to follow; the real engine's /tokenize is exercised by the
integration tests against a running vLLM.
"""

from __future__ import annotations

import math

import pytest

from app.conversation.history import MIN_REPLY_TOKENS, Conversation, TooLong, Turn, fit

OVERHEAD = 3  # tokens per message for the chat template's role markers


class WordCounter:
    """Counts words + OVERHEAD per message, and how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict]) -> int:
        self.calls += 1
        return sum(len(m["content"].split()) + OVERHEAD for m in messages)


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def conversation(turn_sizes: list[tuple[int, int]], system_words: int = 4) -> Conversation:
    """Turn i has user/assistant texts of the given word counts, tagged with i."""
    conv = Conversation(words(system_words, "s"))
    for i, (u, a) in enumerate(turn_sizes):
        conv.turns.append(Turn(words(u, f"u{i}_"), words(a, f"a{i}_")))
    return conv


async def brute_force(conv: Conversation, new: str, max_model_len: int, max_tokens: int):
    """The specification, one count per candidate: (dropped, prompt tokens, reply budget)."""
    count = WordCounter()
    budget = min(max_tokens, max_model_len)
    for drop in range(len(conv.turns) + 1):
        tokens = await count(conv.messages(new, keep_from=drop))
        if tokens + budget <= max_model_len:
            return drop, tokens, budget
    if max_model_len - tokens < MIN_REPLY_TOKENS:
        return None
    return len(conv.turns), tokens, max_model_len - tokens


SIZES = [(5, 20), (2, 3), (12, 40), (1, 1), (7, 9), (30, 2), (4, 25)]
NEW = words(6, "new")


async def test_everything_fits_nothing_dropped():
    conv = conversation(SIZES)
    count = WordCounter()
    total = await WordCounter()(conv.messages(NEW))
    fitted = await fit(conv, NEW, count, max_model_len=total + 100, max_tokens=100)
    assert fitted.dropped_turns == 0
    assert fitted.messages == conv.messages(NEW)
    assert fitted.prompt_tokens == total
    assert fitted.max_tokens == 100


async def test_oldest_turns_are_dropped_first():
    conv = conversation([(10, 10), (10, 10), (1, 1)])
    # system 7 + turns 13+13 + 13+13 + 4+4 + new 9 = 76; 60 + 10 leaves room for the last two only.
    fitted = await fit(conv, NEW, WordCounter(), max_model_len=60, max_tokens=10)
    assert fitted.dropped_turns == 1
    assert fitted.messages == conv.messages(NEW, keep_from=1)
    assert fitted.messages[1]["content"] == conv.turns[1].user


@pytest.mark.parametrize("max_tokens", [1, 30, 64])
async def test_drops_the_fewest_turns_needed_like_a_linear_search(max_tokens):
    conv = conversation(SIZES)
    for max_model_len in range(1, 400):
        expected = await brute_force(conv, NEW, max_model_len, max_tokens)
        if expected is None:
            with pytest.raises(TooLong):
                await fit(conv, NEW, WordCounter(), max_model_len, max_tokens)
            continue
        fitted = await fit(conv, NEW, WordCounter(), max_model_len, max_tokens)
        assert (fitted.dropped_turns, fitted.prompt_tokens, fitted.max_tokens) == expected, max_model_len
        assert fitted.prompt_tokens + fitted.max_tokens <= max_model_len


async def test_system_prompt_and_new_message_are_always_kept():
    conv = conversation(SIZES)
    for max_model_len in range(40, 400, 7):
        fitted = await fit(conv, NEW, WordCounter(), max_model_len, max_tokens=20)
        assert fitted.messages[0] == {"role": "system", "content": conv.system_prompt}
        assert fitted.messages[-1] == {"role": "user", "content": NEW}
        kept = fitted.messages[1:-1]
        assert len(kept) == 2 * (len(conv.turns) - fitted.dropped_turns)


async def test_without_system_prompt_there_is_no_system_message():
    conv = Conversation("", [Turn("a b", "c d")])
    fitted = await fit(conv, "hello", WordCounter(), max_model_len=100, max_tokens=10)
    assert [m["role"] for m in fitted.messages] == ["user", "assistant", "user"]


async def test_reply_budget_shrinks_when_dropping_turns_is_not_enough():
    conv = conversation([(10, 10)], system_words=4)
    # Without the turn: system 7 + new 9 = 16 tokens; 16 + 50 > 40, so the reply gets 24.
    fitted = await fit(conv, NEW, WordCounter(), max_model_len=40, max_tokens=50)
    assert fitted.dropped_turns == 1
    assert fitted.prompt_tokens == 16
    assert fitted.max_tokens == 24
    assert fitted.messages == conv.messages(NEW, keep_from=1)


async def test_reply_budget_never_exceeds_max_model_len():
    fitted = await fit(Conversation(""), "hi", WordCounter(), max_model_len=100, max_tokens=10_000)
    assert fitted.prompt_tokens == 4
    assert fitted.max_tokens == 96


async def test_new_message_alone_too_long_raises_with_tokens_and_limit():
    conv = conversation([(1, 1)], system_words=4)
    new = words(30)  # system 7 + new 33 = 40 tokens
    with pytest.raises(TooLong) as info:
        await fit(conv, new, WordCounter(), max_model_len=50, max_tokens=20)
    assert info.value.tokens == 40
    assert info.value.limit == 50 - MIN_REPLY_TOKENS
    assert "40 tokens" in str(info.value)


async def test_exactly_min_reply_tokens_left_is_still_accepted():
    conv = Conversation("")
    new = words(7)  # 10 tokens
    fitted = await fit(conv, new, WordCounter(), max_model_len=10 + MIN_REPLY_TOKENS, max_tokens=500)
    assert fitted.max_tokens == MIN_REPLY_TOKENS
    with pytest.raises(TooLong):
        await fit(conv, new, WordCounter(), max_model_len=9 + MIN_REPLY_TOKENS, max_tokens=500)


@pytest.mark.parametrize("reply", ["", "   ", "\n\t"])
def test_add_ignores_empty_replies(reply):
    conv = Conversation("sys")
    conv.add("question", reply)
    assert conv.turns == []


def test_add_records_a_real_reply():
    conv = Conversation("sys")
    conv.add("question", "answer")
    assert conv.turns == [Turn("question", "answer")]
    assert conv.messages("next") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "next"},
    ]


@pytest.mark.parametrize("max_model_len", [40, 100, 700, 1200, 1700, 3000])
async def test_counts_logarithmically_many_times_for_64_turns(max_model_len):
    conv = conversation([(5, 15)] * 64)  # 26 tokens a turn
    count = WordCounter()
    fitted = await fit(conv, NEW, count, max_model_len=max_model_len, max_tokens=50)
    expected = await brute_force(conv, NEW, max_model_len, max_tokens=50)
    assert (fitted.dropped_turns, fitted.prompt_tokens, fitted.max_tokens) == expected
    assert count.calls <= math.ceil(math.log2(64 + 1)) + 1  # 8; a linear scan needs up to 65


# --- rewinding: an edited message (same id) or Regenerate asks again ---------------------

def chat(*exchanges: str) -> Conversation:
    """A conversation where message id ``m<i>`` asked ``q<i>`` and got ``a<i>``."""
    conv = Conversation("sys")
    for i in exchanges:
        conv.ask(f"m{i}", f"q{i}")
        conv.add(f"q{i}", f"a{i}")
    return conv


def test_a_new_message_forgets_nothing():
    conv = chat("1", "2")
    assert conv.ask("m3", "q3") == 0
    assert [t.user for t in conv.turns] == ["q1", "q2"]
    assert conv.last_asked() == ("m3", "q3")


def test_editing_a_message_forgets_its_turn_and_everything_after():
    conv = chat("1", "2", "3")
    assert conv.ask("m2", "q2 edited") == 2
    assert [t.user for t in conv.turns] == ["q1"]
    assert conv.messages("q2 edited")[-1] == {"role": "user", "content": "q2 edited"}
    conv.add("q2 edited", "new answer")
    assert [t.assistant for t in conv.turns] == ["a1", "new answer"]
    # The later message m3 is gone with its turn: asking it again is a new message.
    assert conv.ask("m3", "q3") == 0
    assert conv.last_asked() == ("m3", "q3")


def test_editing_a_message_that_got_no_reply_still_forgets_what_came_after():
    conv = chat("1")
    conv.ask("m2", "q2")  # the engine failed: no turn
    conv.ask("m3", "q3")
    conv.add("q3", "a3")
    assert conv.ask("m2", "q2 again") == 1
    assert [t.user for t in conv.turns] == ["q1"]


def test_regenerating_the_last_reply_replaces_it():
    conv = chat("1", "2")
    message_id, user = conv.last_asked()
    assert conv.ask(message_id, user) == 1
    conv.add(user, "another a2")
    assert [(t.user, t.assistant) for t in conv.turns] == [("q1", "a1"), ("q2", "another a2")]


def test_regenerating_after_a_stop_without_text_or_an_error_forgets_nothing():
    conv = chat("1")
    conv.ask("m2", "q2")  # stopped before the first token, or an engine error
    assert conv.last_asked() == ("m2", "q2")
    assert conv.ask("m2", "q2") == 0
    assert len(conv.turns) == 1


def test_nothing_asked_yet_has_nothing_to_regenerate():
    assert Conversation("sys").last_asked() is None


def test_figures_stay_with_their_turn():
    conv = Conversation("")
    conv.add("q", "a", {"completion_tokens": 5})
    assert conv.turns[0].figures == {"completion_tokens": 5}

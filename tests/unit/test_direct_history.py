"""A direct chat's history within the model's window (server/loadtest/users/history.py)."""

from __future__ import annotations

from server.loadtest.users.history import DirectHistory, most_tokens


def contents(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages]


def test_without_a_window_every_exchange_is_sent():
    history = DirectHistory("Be brief.")
    for n in range(50):
        history.messages(f"q{n}")
        history.add(f"q{n}", f"a{n}", prompt_tokens=1000 * n, reply_tokens=500)
    assert len(history.messages("last")) == 1 + 2 * 50 + 1 and history.forgotten == 0


def test_the_oldest_exchanges_go_until_history_prompt_and_reply_fit():
    # A 400-token window and 100-token replies: the engine counted 60 tokens for the first
    # request (system prompt and q0), then q1 and a1 add 140.
    history = DirectHistory("Be brief.", window=400, reply_tokens=100)
    assert contents(history.messages("q0")) == ["Be brief.", "q0"]
    history.add("q0", "a0", prompt_tokens=60, reply_tokens=100)      # history 160
    history.messages("q1")
    history.add("q1", "a1", prompt_tokens=200, reply_tokens=100)     # history 300
    assert history.forgotten == 0
    # 300 + the new message (at most 10 tokens: 2 bytes + 8) + 100 > 400: q0's exchange goes.
    sent = history.messages("q2")
    assert contents(sent) == ["Be brief.", "q1", "a1", "q2"] and history.forgotten == 1
    # What a drop frees is never overstated: the first exchange's share left the system prompt
    # out (counted from above), so the estimate stays at or above what the engine will count.
    assert history.tokens == 300 - (160 - most_tokens("Be brief.")) >= 300 - 160
    history.add("q2", "a2", prompt_tokens=180, reply_tokens=100)     # the engine's own count again
    assert history.tokens == 280


def test_the_system_prompt_and_the_new_message_are_never_dropped():
    history = DirectHistory("S", window=50, reply_tokens=40)
    history.messages("q0")
    history.add("q0", "a0", prompt_tokens=30, reply_tokens=40)
    assert contents(history.messages("q1")) == ["S", "q1"] and history.forgotten == 1


def test_an_exchange_without_the_engines_counts_is_counted_from_above():
    history = DirectHistory("", window=10_000, reply_tokens=10)
    history.add("hello", "world", prompt_tokens=None, reply_tokens=None)
    assert history.tokens == most_tokens("hello") + most_tokens("world") == 26

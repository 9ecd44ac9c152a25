"""The conversation as the model sees it, fitted to the engine's real context window.

Only real turns are kept here: stop notices, error messages and figures shown
in the chat never go back to the model.  Before each request the prompt is
counted exactly (the engine's own ``/tokenize`` applies the chat template), and
the oldest whole turns are dropped until prompt + reply budget fit in
``max_model_len``.  The system prompt and the new message are never dropped.
Editing a sent message or regenerating the last reply rewinds the conversation to
before that message (:meth:`Conversation.ask`), as Chainlit rewinds the chat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from app.engine.token_count import Counter

# A reply shorter than this is not worth sending a request for.
MIN_REPLY_TOKENS = 16


@dataclass
class Turn:
    user: str
    assistant: str
    figures: dict = field(default_factory=dict)  # how the reply came (app/conversation/export.py shows them)


@dataclass
class Conversation:
    system_prompt: str
    turns: list[Turn] = field(default_factory=list)
    # Each user message asked, by Chainlit's message id: (turns before it, its text as the
    # model got it). An edited message keeps its id, and Regenerate asks the last one again.
    asked: dict[str, tuple[int, str]] = field(default_factory=dict)

    def ask(self, message_id: str, user: str) -> int:
        """Note that ``message_id`` is being answered; return how many turns were forgotten.

        An id asked before is an edit or a regeneration: the model must not see its old
        turn, nor anything after it, so those turns are forgotten first.
        """
        forgotten = 0
        if message_id in self.asked:
            keep = self.asked[message_id][0]
            forgotten = len(self.turns) - keep
            del self.turns[keep:]
            ids = list(self.asked)
            for later in ids[ids.index(message_id):]:
                del self.asked[later]
        self.asked[message_id] = (len(self.turns), user)
        return forgotten

    def last_asked(self) -> Optional[tuple[str, str]]:
        """(id, text) of the last user message asked, which Regenerate asks again."""
        if not self.asked:
            return None
        message_id = next(reversed(self.asked))
        return message_id, self.asked[message_id][1]

    def messages(self, new_user: str, keep_from: int = 0) -> list[dict]:
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        for turn in self.turns[keep_from:]:
            out.append({"role": "user", "content": turn.user})
            out.append({"role": "assistant", "content": turn.assistant})
        out.append({"role": "user", "content": new_user})
        return out

    def add(self, user: str, assistant: str, figures: Optional[dict] = None) -> None:
        """Record a finished (or stopped) exchange; an empty reply is not a turn."""
        if assistant.strip():
            self.turns.append(Turn(user, assistant, figures or {}))


class TooLong(ValueError):
    def __init__(self, tokens: int, limit: int):
        super().__init__(f"{tokens} tokens, limit {limit}")
        self.tokens, self.limit = tokens, limit


@dataclass
class FittedRequest:
    messages: list[dict]
    prompt_tokens: int
    max_tokens: int
    dropped_turns: int


async def fit(conversation: Conversation, new_user: str, count: Counter,
              max_model_len: int, max_tokens: int) -> FittedRequest:
    """Drop the oldest turns until prompt + ``max_tokens`` fit; shrink the reply budget last.

    Raises :class:`TooLong` when the system prompt and the new message alone leave
    less than ``MIN_REPLY_TOKENS`` for the reply.
    """
    reply_budget = min(max_tokens, max_model_len)
    n = len(conversation.turns)
    # Token counts only grow with kept turns, so binary-search the fewest to drop.
    low, high = 0, n
    fitted: Optional[tuple[int, int]] = None  # (keep_from, tokens)
    while low <= high:
        mid = (low + high) // 2
        tokens = await count(conversation.messages(new_user, keep_from=mid))
        if tokens + reply_budget <= max_model_len:
            fitted, high = (mid, tokens), mid - 1
        else:
            low = mid + 1
    if fitted is None:
        # Even with every turn dropped the full reply budget does not fit: shrink it.
        tokens = await count(conversation.messages(new_user, keep_from=n))
        if max_model_len - tokens < MIN_REPLY_TOKENS:
            raise TooLong(tokens, max_model_len - MIN_REPLY_TOKENS)
        fitted, reply_budget = (n, tokens), max_model_len - tokens
    keep_from, tokens = fitted
    return FittedRequest(conversation.messages(new_user, keep_from), tokens, reply_budget, keep_from)

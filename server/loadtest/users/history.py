"""The history a chat straight to the engine sends, kept within the model's window (pure).

The app counts each prompt exactly with the engine's /tokenize and drops the oldest whole
turns until prompt and reply fit (app/conversation/history.py). A simulated user going
straight to the engine must do the same, or a long steady state ends every chat with
HTTP 400 once its history outgrows the window; an extra /tokenize per turn would load the
API servers being measured, so the counts come from each reply's usage instead: the last
request's prompt tokens plus its reply's are the history's tokens, and the difference
from the history before is what that exchange adds. Only the new message is estimated,
from above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


def most_tokens(text: str) -> int:
    """An upper bound of the tokens ``text`` takes: a byte-level tokenizer gives no more
    tokens than bytes; the chat template adds a few around a message."""
    return len(text.encode()) + 8


@dataclass
class DirectHistory:
    system_prompt: str
    window: Optional[int] = None  # the engine's max_model_len; None: never trimmed
    reply_tokens: int = 0         # what each request asks for (max_tokens)
    exchanges: list[tuple[str, str, int]] = field(default_factory=list)  # user, assistant, tokens
    tokens: int = 0               # the history's tokens, from the last reply's usage
    forgotten: int = 0            # exchanges dropped to fit

    def messages(self, prompt: str) -> list[dict]:
        """The request's messages for the new ``prompt``, the oldest exchanges dropped first
        until the history, the prompt and the reply fit the window."""
        if self.window:
            budget = self.window - self.reply_tokens - most_tokens(prompt)
            while self.exchanges and self.tokens > budget:
                self.tokens -= self.exchanges.pop(0)[2]
                self.forgotten += 1
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        turns = [{"role": role, "content": text} for user, assistant, _ in self.exchanges
                 for role, text in (("user", user), ("assistant", assistant))]
        return [*system, *turns, {"role": "user", "content": prompt}]

    def add(self, prompt: str, reply: str, prompt_tokens: Optional[int], reply_tokens: Optional[int]) -> None:
        """The exchange just answered, with the engine's counts of its request (None: unknown,
        the exchange then counted from above)."""
        if prompt_tokens is None or reply_tokens is None:
            total = self.tokens + most_tokens(prompt) + most_tokens(reply)
        else:
            total = prompt_tokens + reply_tokens
        # The first exchange's share also holds the system prompt, which stays: counting it out
        # from above keeps what a drop frees from looking larger than it is.
        kept = most_tokens(self.system_prompt) if not self.exchanges and self.system_prompt else 0
        self.exchanges.append((prompt, reply, max(0, total - self.tokens - kept)))
        self.tokens = total

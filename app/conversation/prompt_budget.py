"""Fit a chat's next request without counting its whole prompt again, while it is far from full.

``history.fit`` counts the prompt exactly with the engine's ``/tokenize``, once or
several times per message (a binary search over the turns to drop).  In a crowd that
is a round trip per message to vLLM's API server, itself a bottleneck.  But a chat's
prompts only grow at the end: the next prompt is the last one plus the reply and the
new message.  So each chat keeps the length of its last prompt (exact: vLLM's own
``usage.prompt_tokens`` for it) and bounds the next one from above without asking:

    next <= last + sum over the new messages of (UTF-8 bytes of the text + per_message)

A token stands for at least one byte of the text, except the tokens a chat template
adds around each message, which ``per_message`` bounds: measured once per model with
``/tokenize``, once per model and process (docs/notes.md, "Counting a prompt without
the tokenizer").  A chat's first prompt has no last one to grow from; it is bounded
from the same measurement, the template's tokens for one short message standing for
what the template adds once:

    first <= one + sum over the messages of (UTF-8 bytes of the text + per_message)

A reply's bytes overstate its tokens four- to sixfold, so with replies of a few hundred
tokens and a window of a few thousand, the third message of a chat already needed the exact
count.  The engine's usage says how many tokens the reply was generated in; read back inside
the next prompt its text may be split differently (the tokenizer's own split instead of the
model's, a byte-level piece shown as U+FFFD and read back as three), so the reply counts at
most ``reply_bound`` of its generated tokens, or its bytes, whichever is less.

While the bound and the reply fit in the window, the request goes as it is; near the
limit, or when the history changed otherwise (a new system prompt, an edit), the
exact fit runs as before.  Either way no request exceeds the window.  So a chat far
from its window asks ``/tokenize`` nothing at all: in a crowd, counting each chat's
first message had been a round trip to vLLM's busy API server before every first
token (docs/performance.md, "The app's cost per chat").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from app.conversation.history import Conversation, FittedRequest, fit
from app.engine.single_flight import SingleFlight
from app.engine.token_count import Counter

# Tokens the template may add beyond the calibration (a token merging across a message's
# edge, a tokenizer's dummy prefix space).
SLACK_PER_MESSAGE = 4
PROBE = "x"


@dataclass(frozen=True)
class Template:
    """What a model's chat template adds, at most: per message, and around one message."""

    per_message: int
    one: int  # the whole prompt of one one-byte message


# Per served model, for every chat of the process (template_overhead): measured once, also
# when a crowd's first messages all arrive before the measurement is back.
OVERHEADS: dict[str, SingleFlight[Template]] = {}


# A generated reply read back as a prompt: the tokenizer may split it into more tokens than the
# model generated it in; this share of them, at most (measured against the real engine's
# /tokenize in tests/app/test_prompt_budget.py).
RETOKENIZED_SHARE = 0.25
# Bytes U+FFFD takes in UTF-8: a byte-level token that decoded to it may be read back as three.
REPLACEMENT_TOKENS = 3


@dataclass(frozen=True)
class Reply:
    """A reply as the chat keeps it, and the tokens the engine generated it in."""

    text: str
    tokens: int


@dataclass
class Known:
    """A prompt of this chat whose length is known: exactly, or as an upper bound."""

    messages: list[dict]
    tokens: int
    keep_from: int  # turns it left out
    reply: Optional[Reply] = None  # its answer, once the engine said how long it was


def reply_bound(reply: Reply) -> int:
    """At most this many tokens for a generated reply's text inside a prompt."""
    return (reply.tokens + math.ceil(RETOKENIZED_SHARE * reply.tokens)
            + REPLACEMENT_TOKENS * reply.text.count("\ufffd"))


def message_bound(message: dict, per_message: int, reply: Optional[Reply] = None) -> int:
    """At most this many tokens for one message inside a prompt: its bytes, or for ``reply``'s
    own text the tokens it was generated in, whichever bound is lower."""
    content = str(message.get("content") or "")
    tokens = len(content.encode("utf-8"))
    if reply is not None and message.get("role") == "assistant" and content == reply.text:
        tokens = min(tokens, reply_bound(reply))
    return tokens + per_message


def text_bound(messages: list[dict], per_message: int, reply: Optional[Reply] = None) -> int:
    """At most this many tokens for these messages inside a prompt."""
    return sum(message_bound(m, per_message, reply) for m in messages)


def grown_bound(known: Optional[Known], messages: list[dict], per_message: int) -> Optional[int]:
    """An upper bound of ``messages``' tokens, when they are ``known``'s plus more; else None."""
    if known is None or len(messages) < len(known.messages):
        return None
    if messages[:len(known.messages)] != known.messages:
        return None
    return known.tokens + text_bound(messages[len(known.messages):], per_message, known.reply)


def first_bound(messages: list[dict], template: Template) -> int:
    """An upper bound of a whole prompt's tokens, with nothing known before it."""
    return template.one + text_bound(messages, template.per_message)


async def template_overhead(count: Counter) -> Template:
    """What the chat template adds, at most (two /tokenize calls)."""
    one = await count([{"role": "user", "content": PROBE}])
    three = await count([{"role": "user", "content": PROBE}, {"role": "assistant", "content": PROBE},
                         {"role": "user", "content": PROBE}])
    return Template(max(0, math.ceil((three - one) / 2)) + SLACK_PER_MESSAGE, one)


class PromptBudget:
    """One chat's last known prompt length, and the fit that uses it."""

    def __init__(self, overheads: Optional[dict[str, SingleFlight[Template]]] = None) -> None:
        self.known: Optional[Known] = None
        self.overheads = OVERHEADS if overheads is None else overheads
        self.exact_fits = 0  # how often the exact fit ran (tests read it)

    async def fit(self, conversation: Conversation, new_user: str, count: Counter, model: str,
                  max_model_len: int, max_tokens: int) -> FittedRequest:
        """``history.fit``'s result, from the bound when it fits; ``count`` counts for ``model``."""
        reply_budget = min(max_tokens, max_model_len)
        template = await self.overheads.setdefault(model, SingleFlight()).get(
            lambda: template_overhead(count))
        keep_from = self.known.keep_from if self.known else 0
        messages = conversation.messages(new_user, keep_from=keep_from)
        bound = (first_bound(messages, template) if self.known is None
                 else grown_bound(self.known, messages, template.per_message))
        if bound is not None and bound + reply_budget <= max_model_len:
            return self.remember(FittedRequest(messages, bound, reply_budget, keep_from))
        self.exact_fits += 1
        return self.remember(await fit(conversation, new_user, count, max_model_len, max_tokens))

    def estimate(self, conversation: Conversation, new_user: str) -> int:
        """About how many tokens the prompt for ``new_user`` takes, asking nothing: the last
        prompt grown by what came since, else the bytes of its text (a token is at least a
        byte), for the reservation of the user's tokens (app/conversation/admission.py)."""
        keep_from = self.known.keep_from if self.known else 0
        messages = conversation.messages(new_user, keep_from=keep_from)
        grown = grown_bound(self.known, messages, SLACK_PER_MESSAGE)
        return grown if grown is not None else text_bound(messages, SLACK_PER_MESSAGE)

    def remember(self, fitted: FittedRequest) -> FittedRequest:
        self.known = Known(fitted.messages, fitted.prompt_tokens, fitted.dropped_turns)
        return fitted

    def sent(self, prompt_tokens: Optional[int], reply: Optional[Reply] = None) -> None:
        """The engine's usage for the prompt just sent, when it gave one: the prompt's exact
        count, and the reply with the tokens it was generated in."""
        if self.known is not None and prompt_tokens is not None:
            self.known.tokens = prompt_tokens
            self.known.reply = reply

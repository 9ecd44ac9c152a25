"""A reply the engine dropped, asked for again: before its first token, or from the text shown.

When an engine copy dies (or its connection breaks) during a reply, the chat does not show
an error if a live engine can take over: a reply cut before its first token is simply sent
again, and a reply cut mid-stream is continued from the text the user already sees. vLLM
continues an assistant message that ends the conversation when asked with
``continue_final_message`` (and no generation prompt): the model's chat template renders the
text so far as the start of the assistant's turn, and the new tokens follow it.

Pure functions only: the chat (app/conversation/answer.py) does the I/O, and a worker that
takes over a chat from a dead one builds the same request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

# The kinds of app.engine.engine_client.error_kind after which another try may succeed: the engine
# (or its copy) refused the connection, closed it under the request, or is still loading. A refusal (bad request, key, model) or a
# timeout (an engine that hangs, after request_timeout_s) would fail the same way again.
RETRYABLE = frozenset({"unreachable", "cut", "loading"})

Step = Literal["retry", "continue", "done", "give_up"]


@dataclass(frozen=True)
class ContinuationRequest:
    """What goes to ``stream_reply`` to continue a reply: its messages, max_tokens, extra_body."""

    messages: list[dict]
    max_tokens: int
    extra_body: dict


def continuation_request(messages: list[dict], shown: str, max_tokens: int, produced_tokens: int,
                         extra_body: Optional[dict] = None) -> ContinuationRequest:
    """The request that continues a reply of which ``shown`` (``produced_tokens`` tokens) came.

    ``messages`` and ``max_tokens`` are the cut request's; ``extra_body`` its other fields
    (sampling, stream_interval), kept. The reply may still have ``max_tokens -
    produced_tokens`` tokens, at least 1 (``next_step`` says "done" before it comes to 0).
    """
    return ContinuationRequest(
        messages=[*messages, {"role": "assistant", "content": shown}],
        max_tokens=max(1, max_tokens - produced_tokens),
        extra_body={**(extra_body or {}), "continue_final_message": True,
                    "add_generation_prompt": False},
    )


def next_step(kind: str, shown: str, produced_tokens: int, max_tokens: int,
              waited_s: float, wait_limit_s: float) -> Step:
    """What to do after a reply failed with ``error_kind`` ``kind``.

    "retry": nothing was shown, send the same request again; "continue": text was shown,
    continue it (``continuation_request``); "done": the reply had all its tokens when it was
    cut, so it is complete; "give_up": the failure is not one another try mends, or the
    engine has been away ``wait_limit_s`` already.
    """
    if shown and produced_tokens >= max_tokens:
        return "done"
    if kind not in RETRYABLE or waited_s >= wait_limit_s:
        return "give_up"
    return "continue" if shown else "retry"


FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.5, 4.0


def retry_delay_s(attempt: int, left_s: float) -> float:
    """The pause before try ``attempt`` (1, 2, ...): at once first, since with several copies
    the balancer already sends it to a live one; then doubling from FIRST_PAUSE_S up to
    LONGEST_PAUSE_S, while a lone engine restarts; never past the time left."""
    if attempt <= 1:
        return 0.0
    return max(0.0, min(FIRST_PAUSE_S * 2 ** (attempt - 2), LONGEST_PAUSE_S, left_s))

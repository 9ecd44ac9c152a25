"""The chat's estimate of a prompt's tokens against the exact count of the session's vLLM."""

from __future__ import annotations

import re

import httpx

from app.engine import token_count
from app.engine.engine_client import count_tokens
from server.paths import ROOT


def corpus_conversations() -> list[list[dict]]:
    """Exchanges of the demo model's corpus (English and Chinese) as chat messages."""
    text = (ROOT / "server" / "stack" / "demo_corpus.txt").read_text(encoding="utf-8")
    pairs = re.findall(r"User: (.+)\nAssistant: (.+)", text)
    return [[{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            for u, a in pairs[::25]]


async def test_the_estimate_is_above_the_exact_count_but_not_far(engine):
    """Against vLLM's exact count (the demo model's tokenizer) on the corpus' exchanges."""
    settings, _ = engine
    ratios = []
    async with httpx.AsyncClient(timeout=10) as http:
        for messages in corpus_conversations():
            exact = await count_tokens(http, settings.engine_base_url, settings.served_model_name, messages)
            ratios.append(token_count.estimate_tokens(messages) / exact)
    print(f"estimate / exact over {len(ratios)} exchanges: min {min(ratios):.2f}, "
          f"median {sorted(ratios)[len(ratios) // 2]:.2f}, max {max(ratios):.2f}")
    assert min(ratios) >= 1.0, "the estimate under-counted: the server would refuse the request"
    # The demo tokenizer learned these very lines, so it packs some of them (Chinese ones
    # above all) tighter than a real tokenizer packs chat text: bound the typical waste.
    assert sorted(ratios)[len(ratios) // 2] <= 2.0, "the estimate wastes half the window"

"""Prompts of an exact token length that share no prefix the server could cache.

Lengths are counted by the server's own tokenizer (vLLM's ``/tokenize``), so a
prompt of 1,024 tokens is 1,024 tokens to the engine; where the server has no
``/tokenize`` one English word stands for one token, and the result says so.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from dataclasses import replace
from typing import Optional

import httpx

from server.loadtest.lib.config import (
    BenchConfig,
    BenchError,
    Prompt,
    check_fits,
    sample_lengths,
    usage_lengths,
)
from server.loadtest.lib.target import error_message, served_model
from server.paths import ROOT
from server.progress import StatusLine
from server.settings import auth_headers

# Any text will do for prompts: only its token count matters. This one is in the repo.
CORPUS = ROOT / "server" / "stack" / "demo_corpus.txt"
# Round trips a prompt may take to reach its exact length (vLLM's random dataset uses 10).
MAX_LENGTH_FIXES = 10
PROMPT_BUILDERS = 8  # prompts built at once (each takes a few /tokenize round trips)
# vLLM's prefix cache reuses whole KV blocks (16 tokens by default) from the start of a
# prompt: prompts whose first block is the same would be partly served from the cache.
PREFIX_BLOCK = 16
MAX_SHARED_FIRST_BLOCKS = 0.01  # of the prompts; more and TTFT would be a cached prompt's


class ServerTokenizer:
    """The server's own tokenizer through vLLM's /tokenize and /detokenize."""

    def __init__(self, http: httpx.AsyncClient, cfg: BenchConfig, model: str):
        self.http, self.url, self.model, self.headers = http, cfg.url, model, auth_headers(cfg.api_key)

    async def encode(self, text: str, special: bool) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": special}
        response = await self.http.post(f"{self.url}/tokenize", json=body, headers=self.headers)
        response.raise_for_status()
        return response.json()["tokens"]

    async def decode(self, ids: list[int]) -> str:
        response = await self.http.post(f"{self.url}/detokenize", headers=self.headers,
                                        json={"model": self.model, "tokens": ids})
        response.raise_for_status()
        return response.json()["prompt"]


async def exact_prompt(tokenizer: ServerTokenizer, corpus_ids: list[int], offset: int,
                       target: int, specials: int) -> Prompt:
    """A window of the corpus that the server counts as exactly ``target`` tokens.

    Decoding token ids and encoding the text again can merge or split tokens at the
    window's edges, so the window is corrected until the count is right, as vLLM's
    random dataset does (``gen_prompt_decode_to_target_len``).
    """
    want = max(1, target - specials)
    for _ in range(MAX_LENGTH_FIXES):
        ids = [corpus_ids[(offset + k) % len(corpus_ids)] for k in range(want)]
        text = await tokenizer.decode(ids)
        count = len(await tokenizer.encode(text, special=True))
        if count == target:
            break
        want = max(1, want + target - count)
    return Prompt(text, count, 0)


def shared_first_blocks(ids: list[int], offsets: list[int], block: int = PREFIX_BLOCK) -> int:
    """How many prompts, read from ``ids`` at ``offsets``, repeat an earlier one's first block."""
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for offset in offsets:
        first = tuple(ids[(offset + k) % len(ids)] for k in range(block))
        repeats += first in seen
        seen.add(first)
    return repeats


def distinct_offsets(ids: list[int], count: int, rng: random.Random) -> Optional[list[int]]:
    """``count`` start places in ``ids`` whose prompts do not share their first block.

    None when ``ids`` cannot give them: a corpus too short for ``count`` prompts, or
    one the server's tokenizer reads as a few ids (a stand-in tokenizer maps it to <unk>).
    """
    if not ids:
        return None
    offsets = rng.sample(range(len(ids)), min(count, len(ids)))
    offsets = [offsets[i % len(offsets)] for i in range(count)]
    if shared_first_blocks(ids, offsets) > MAX_SHARED_FIRST_BLOCKS * count:
        return None
    return offsets


async def model_text_ids(http: httpx.AsyncClient, cfg: BenchConfig, model: str,
                         tokenizer: ServerTokenizer, need: int,
                         max_model_len: Optional[int]) -> list[int]:
    """Token ids of text the model samples itself: words its tokenizer surely knows.

    Sampled at temperature 1 with a seed per request (vLLM takes ``seed``), in pieces that
    fit the context, all at once; ``ignore_eos`` keeps every piece full length.
    """
    piece = max(PREFIX_BLOCK, min(need, 2048, (max_model_len or 2048) - 16))
    async def sample(seed: int) -> str:
        body = {"model": model, "prompt": "Hello", "max_tokens": piece, "temperature": 1.0,
                "seed": cfg.load.seed * 1000 + seed, "ignore_eos": True}
        response = await http.post(f"{cfg.url}/v1/completions", json=body,
                                   headers=auth_headers(cfg.api_key))
        if response.status_code != 200:
            raise BenchError(f"{cfg.url}/v1/completions answered HTTP {response.status_code} "
                             f"while sampling prompt text: {error_message(response.content)}")
        return response.json()["choices"][0]["text"]
    texts = await asyncio.gather(*(sample(i) for i in range(math.ceil(need / piece))))
    return await tokenizer.encode(" ".join(texts), special=False)


async def build_prompts(http: httpx.AsyncClient, cfg: BenchConfig, model: str,
                        lengths: list[tuple[int, int]], max_model_len: Optional[int],
                        rng: random.Random, status: StatusLine) -> tuple[list[Prompt], str]:
    """One prompt per (prompt, reply) length, and how their lengths were counted.

    Every prompt starts at a different place of the corpus, so no two share a
    prefix the server could serve from its prefix cache.  Where the server's
    tokenizer cannot tell the corpus apart (the GPU stand-in's reads it all as
    <unk>, and 512 <unk>s make every prompt the same), the text is sampled from
    the model instead, as vLLM's random dataset draws random token ids.
    """
    corpus = CORPUS.read_text(encoding="utf-8")
    tokenizer = ServerTokenizer(http, cfg, model)
    try:
        corpus_ids = await tokenizer.encode(corpus, special=False)
        specials = len(await tokenizer.encode("", special=True))
    except (httpx.HTTPError, ValueError, KeyError):
        # Not vLLM (no /tokenize): one English word is roughly one token.
        words = [w for w in corpus.split() if w.isascii()]
        offsets = rng.sample(range(len(words)), min(len(lengths), len(words)))
        prompts = [Prompt(" ".join(words[(offsets[i % len(offsets)] + k) % len(words)]
                                   for k in range(p)), p, o) for i, (p, o) in enumerate(lengths)]
        return prompts, "words (approximate: the server has no /tokenize)"
    source = "the repo's corpus"
    offsets = distinct_offsets(corpus_ids, len(lengths), rng)
    if offsets is None:
        status.update("sampling prompt text from the model (the corpus would repeat prompts)")
        need = len(lengths) + max(p for p, _ in lengths)  # a place for each, and room to read
        corpus_ids = await model_text_ids(http, cfg, model, tokenizer, need, max_model_len)
        offsets = distinct_offsets(corpus_ids, len(lengths), rng)
        if offsets is None:
            raise BenchError("Cannot build prompts that differ: the server's tokenizer reads "
                             "both the corpus and the model's own text as a few repeated ids, "
                             "so every prompt would be served from the prefix cache.")
        source = "text sampled from the model (its tokenizer reads the corpus as repeats)"
    # A few at a time: one by one, thousands of prompts took longer than the load itself.
    slots, built = asyncio.Semaphore(PROMPT_BUILDERS), 0
    async def build(offset: int, p: int, o: int) -> Prompt:
        nonlocal built
        async with slots:
            prompt = await exact_prompt(tokenizer, corpus_ids, offset, p, specials)
        built += 1
        status.update(f"building prompts {built}/{len(lengths)}")
        return replace(prompt, max_tokens=o)
    prompts = await asyncio.gather(*(build(offsets[i], p, o) for i, (p, o) in enumerate(lengths)))
    return list(prompts), f"server tokenizer (POST /tokenize), exact; text: {source}"


async def prepare(cfg: BenchConfig, count: int, rng: random.Random,
                  status: StatusLine) -> tuple[str, Optional[int], list[Prompt], str]:
    """The served model, its max_model_len, ``count`` prompts and how they were counted."""
    async with httpx.AsyncClient(timeout=cfg.request_timeout_s) as http:
        model, max_model_len = await served_model(http, cfg)
        if cfg.load.from_usage is not None:
            from server.usage_log import read_usage
            lengths = usage_lengths(read_usage(cfg.load.from_usage)[0], count, rng)
        else:
            lengths = sample_lengths(count, cfg.load.input_len, cfg.load.output_len,
                                     cfg.load.range_ratio, rng)
        check_fits(lengths, max_model_len)
        prompts, counted_by = await build_prompts(http, cfg, model, lengths, max_model_len,
                                                  rng, status)
    return model, max_model_len, prompts, counted_by


def prompts_sharegpt(prompts: list[Prompt]) -> str:
    """The prompts as ``vllm bench serve --dataset-name sharegpt`` reads them, in sending order.

    ShareGPT rather than vLLM's ``custom`` JSONL because reading that needs pandas, which
    the GPU machine lacks; the reply length comes from ``--sharegpt-output-len``.
    """
    return json.dumps([{"conversations": [{"from": "human", "value": p.text},
                                          {"from": "gpt", "value": ""}]} for p in prompts],
                      ensure_ascii=False, indent=0) + "\n"

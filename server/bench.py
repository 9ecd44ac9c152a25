"""``ernie-chat bench``: a streaming load generator for any OpenAI-compatible server.

It sends prompts of known token counts to ``/v1/completions`` with a fixed
number in flight (a closed loop, like ``vllm bench serve --max-concurrency``
with its default infinite request rate), times every streamed chunk and
reports what a user of the server feels: TTFT, TPOT, ITL, end-to-end latency,
throughput and goodput under SLOs.  Definitions are vLLM's (see bench_stats),
so the two tools can be checked against each other (benchmarks/cpu-vs-vllm-bench.md).

Plain completions, not chat, because their prompt is exactly the text sent:
its length in tokens is counted by the server's own tokenizer (``POST
/tokenize``), and no chat template adds tokens we did not count.

The load is bounded by a number of requests and by ``--max-seconds``, and goes
to one URL only: the engine of our settings (which must be on this machine) or
the one given with ``--url``.  The streams are read on plain asyncio
connections (StreamConnection: a busy client would measure itself), the few
calls before the load go through httpx.  This module and bench_stats import
only the standard library, httpx and our settings, so they also run on a GPU
machine that has vLLM but not our app environment; plots are drawn by
bench_plot, which is imported only when they are wanted (or later:
``--plot-only``).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import random
import shlex
import sys
import time
from contextlib import aclosing
from urllib.parse import urlsplit
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Optional

import httpx

from server.bench_stats import RequestRecord, Slo, percent_difference, summarize
from server.progress import StatusLine
from server.settings import auth_headers

if TYPE_CHECKING:  # server.metrics needs prometheus_client: imported when /metrics is read
    from server.metrics import EngineMetrics

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Any text will do for prompts: only its token count matters. This one is in the repo.
CORPUS = Path(__file__).with_name("demo_corpus.txt")
LOOPBACK_HOSTS = {"localhost", "::1", "[::1]"}
# Round trips a prompt may take to reach its exact length (vLLM's random dataset uses 10).
MAX_LENGTH_FIXES = 10
PROMPT_BUILDERS = 8  # prompts built at once (each takes a few /tokenize round trips)
WARMUP_MAX_TOKENS = 16
# vLLM's prefix cache reuses whole KV blocks (16 tokens by default) from the start of a
# prompt: prompts whose first block is the same would be partly served from the cache.
PREFIX_BLOCK = 16
MAX_SHARED_FIRST_BLOCKS = 0.01  # of the prompts; more and TTFT would be a cached prompt's
PREFIX_HIT_WARNING = 0.10       # of the prompt tokens, during a level
READ_LIMIT = 1 << 20  # longest line or read: one event of a long reply fits
CSV_FIELDS = ["concurrency", "index", "success", "prompt_tokens", "max_tokens", "output_tokens",
              "output_tokens_from", "start_s", "ttft_ms", "tpot_ms", "e2e_ms", "itl_mean_ms",
              "finish_reason", "error"]


class BenchError(RuntimeError):
    """A problem the person running the bench can fix; the message says how."""


class StreamError(RuntimeError):
    pass


@dataclass(frozen=True)
class Load:
    """What is sent: how many requests and how long their prompts and replies are."""

    num_prompts: int = 50
    input_len: int = 256
    output_len: int = 128
    range_ratio: float = 0.0
    from_usage: Optional[Path] = None  # sample (prompt, reply) lengths from the app's usage log
    seed: int = 0


@dataclass(frozen=True)
class BenchConfig:
    url: str
    api_key: Optional[str] = None
    model: Optional[str] = None  # served model name; None: the server's first model
    concurrencies: tuple[int, ...] = (4,)
    load: Load = field(default_factory=Load)
    ignore_eos: bool = True
    max_seconds: float = 600.0
    request_timeout_s: float = 300.0
    warmup: int = 1
    temperature: Optional[float] = None  # None: the server's default, as vllm bench serve
    slo: Slo = field(default_factory=Slo)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["api_key"] = "<set>" if self.api_key else None  # results are shared; keys are not
        out["load"]["from_usage"] = str(self.load.from_usage) if self.load.from_usage else None
        return out


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_tokens: int  # exact when counted by the server's tokenizer
    max_tokens: int


# --- lengths (pure) -------------------------------------------------------------

def length_range(mean: int, ratio: float) -> tuple[int, int]:
    """Inclusive bounds of a length drawn around ``mean``, as vLLM's --random-range-ratio."""
    return max(1, math.floor(mean * (1 - ratio))), max(1, math.ceil(mean * (1 + ratio)))


def sample_lengths(n: int, input_len: int, output_len: int, ratio: float,
                   rng: random.Random) -> list[tuple[int, int]]:
    """(prompt tokens, reply tokens) for ``n`` requests: fixed, or uniform in the range."""
    low_in, high_in = length_range(input_len, ratio)
    low_out, high_out = length_range(output_len, ratio)
    return [(rng.randint(low_in, high_in), rng.randint(low_out, high_out)) for _ in range(n)]


def usage_lengths(records: list[dict], n: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` (prompt, reply) pairs drawn with replacement from real chat requests."""
    pairs = [(r["prompt_tokens"], max(1, r["completion_tokens"])) for r in records
             if r["prompt_tokens"] > 0]
    if not pairs:
        raise BenchError("The usage log has no request with a prompt: chat a little first, "
                         "or use --input-len/--output-len.")
    return [rng.choice(pairs) for _ in range(n)]


def check_fits(lengths: list[tuple[int, int]], max_model_len: Optional[int]) -> None:
    if not max_model_len:
        return
    too_long = [p + o for p, o in lengths if p + o > max_model_len]
    if too_long:
        raise BenchError(
            f"{len(too_long)} of {len(lengths)} requests need more than the server's "
            f"max_model_len of {max_model_len} tokens (up to {max(too_long)}); lower "
            "--input-len/--output-len/--range-ratio or serve a longer max-model-len.")


# --- the target -------------------------------------------------------------------

def check_target(url: str, explicit: bool) -> None:
    """Load only this machine, unless the person names another server with --url."""
    host = httpx.URL(url).host
    if explicit or host in LOOPBACK_HOSTS or host.startswith("127."):
        return
    raise BenchError(f"The configured engine ({url}) is not on this machine. A load test "
                     f"sends it real traffic: pass --url {url} to mean it.")


def error_message(body: bytes) -> str:
    """The message of an OpenAI error body, else the start of the body."""
    try:
        data = json.loads(body)
        error = data.get("error", data)
        return str(error.get("message", error) if isinstance(error, dict) else error)[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", errors="replace")


async def served_model(http: httpx.AsyncClient, cfg: BenchConfig) -> tuple[str, Optional[int]]:
    """(model name to send, the server's max_model_len if it says) from /v1/models."""
    try:
        response = await http.get(f"{cfg.url}/v1/models", headers=auth_headers(cfg.api_key))
    except httpx.HTTPError as exc:
        raise BenchError(f"No server answers at {cfg.url} ({type(exc).__name__}: {exc}). "
                         "Start it (./scripts/up) or pass --url.") from None
    if response.status_code != 200:
        raise BenchError(f"{cfg.url}/v1/models answered HTTP {response.status_code}: "
                         f"{error_message(response.content)}")
    models = response.json().get("data") or []
    entry = next((m for m in models if m.get("id") == cfg.model), models[0] if models else {})
    if cfg.model and entry.get("id") != cfg.model:
        raise BenchError(f"{cfg.url} does not serve {cfg.model!r}; it serves "
                         f"{[m.get('id') for m in models]}.")
    if not entry:
        raise BenchError(f"{cfg.url}/v1/models lists no model.")
    return entry["id"], entry.get("max_model_len")


# --- prompts of an exact length ------------------------------------------------

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


# --- the streaming connection ------------------------------------------------------

class StreamConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the event stream back.

    The load's hot path runs on asyncio streams rather than httpx: per streamed chunk
    httpx costs about 145 us of CPU, this about 33 us and vLLM's aiohttp client 48 us
    (measured here against a stub server streaming 64 chunks 1 ms apart).
    A busy client takes CPU from the server it measures, on a small CPU machine from
    the very core vLLM's API server runs on (benchmarks/cpu-vs-vllm-bench.md), and at a
    GPU's thousands of chunks per second httpx alone would fill a core.  Every worker of
    the load owns one connection, so no request waits for one.
    """

    def __init__(self, base_url: str, api_key: Optional[str], idle_timeout_s: float):
        url = urlsplit(base_url)
        self.address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self.tls = url.scheme == "https"
        self.prefix = url.path.rstrip("/")  # a server mounted below a path
        head = {"Host": url.netloc, "Content-Type": "application/json",
                "Accept": "text/event-stream", **auth_headers(api_key)}
        self.head = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.idle_timeout_s = idle_timeout_s
        self.reader: Optional[asyncio.StreamReader] = None
        self.writer: Optional[asyncio.StreamWriter] = None
        self.last_read = 0.0
        self.timed_out = False
        self.watchdog: Optional[asyncio.TimerHandle] = None

    def close(self) -> None:
        """Drop the connection; for a request in flight vLLM then aborts it."""
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def events(self, path: str, body: dict) -> AsyncIterator[dict]:
        """The JSON chunks of the event stream that POST ``path`` answers, to its end.

        Raises StreamError for an HTTP error, for an error sent inside a 200 stream
        (vLLM does that, FACTS.md) and when no byte arrives for ``idle_timeout_s``.
        Use it under ``aclosing``: leaving early closes the connection.
        """
        payload = json.dumps(body).encode()
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{self.head}"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        loop = asyncio.get_running_loop()
        self.timed_out, self.last_read = False, loop.time()
        self.watchdog = loop.call_later(self.idle_timeout_s, self._watch, loop)
        finished = False
        try:
            status, headers = await self._request(request)
            if status != 200:
                text = error_message(b"".join([piece async for piece in self._body(headers)]))
                finished = True
                raise StreamError(f"HTTP {status}: {text}")
            pending = b""
            async for piece in self._body(headers):
                *lines, pending = (pending + piece).split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:") or (data := line[5:].strip()) == b"[DONE]":
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise StreamError(f"error in stream: {error_message(data)}")
                    yield chunk
            finished = headers.get("connection", "").lower() != "close"
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            if self.timed_out:
                raise StreamError(f"no data for {self.idle_timeout_s:g} s") from None
            raise StreamError(f"connection lost ({type(exc).__name__})") from None
        finally:
            self.watchdog.cancel()
            if not finished:  # an unread rest makes the connection useless
                self.close()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """One timer per idle period instead of one per read: cheap on the hot path."""
        idle = loop.time() - self.last_read
        if idle < self.idle_timeout_s:
            self.watchdog = loop.call_later(self.idle_timeout_s - idle, self._watch, loop)
        elif self.writer is not None:
            self.timed_out = True
            self.writer.transport.abort()

    async def _read(self, read) -> bytes:
        data = await read
        self.last_read = asyncio.get_running_loop().time()
        return data

    async def _line(self) -> bytes:
        """One line of the answer's head or chunk framing; the end of the stream here is
        a connection lost (or aborted by the watchdog)."""
        line = await self._read(self.reader.readline())
        if not line:
            raise ConnectionResetError
        return line

    async def _request(self, request: bytes) -> tuple[int, dict]:
        """Send ``request``; return the status and headers of the answer.

        A kept-alive connection that the server closed meanwhile (uvicorn does after
        a few idle seconds) fails at once; it is replaced and the request sent again.
        """
        for reused in (self.writer is not None, False):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(
                    *self.address, ssl=self.tls or None, limit=READ_LIMIT)
            self.writer.write(request)
            try:
                status = await self._read(self.reader.readline())
            except ConnectionError:
                status = b""
            if status:
                break
            self.close()
            if not reused:
                raise ConnectionResetError
        headers = {}
        while (line := await self._line()) not in (b"\r\n", b"\n"):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status.split()[1]), headers

    async def _body(self, headers: dict) -> AsyncIterator[bytes]:
        """The body as it arrives: chunked (how servers stream), sized, or up to the close."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await self._line()).split(b";")[0], 16):
                yield (await self._read(self.reader.readexactly(size + 2)))[:-2]
            while await self._line() not in (b"\r\n", b"\n"):
                pass  # trailer fields
        elif "content-length" in headers:
            yield await self._read(self.reader.readexactly(int(headers["content-length"])))
        else:
            headers["connection"] = "close"
            while piece := await self._read(self.reader.read(READ_LIMIT)):
                yield piece


def completion_body(model: str, prompt: Prompt, ignore_eos: bool,
                    temperature: Optional[float]) -> dict:
    body = {"model": model, "prompt": prompt.text, "max_tokens": prompt.max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM's sampling field: every reply is max_tokens long
    if temperature is not None:
        body["temperature"] = temperature
    return body


async def send(conn: StreamConnection, body: dict, record: RequestRecord) -> RequestRecord:
    """Send one streamed completion and fill ``record`` with its timings."""
    chunks, usage_tokens = 0, None
    started = time.perf_counter()
    last = started
    try:
        stream = conn.events("/v1/completions", body)
        async with aclosing(stream):
            async for chunk in stream:
                now = time.perf_counter()
                if choices := chunk.get("choices"):
                    if record.ttft_s is None:
                        record.ttft_s = now - started
                    else:
                        record.itl_s.append(now - last)
                    last, chunks = now, chunks + 1
                    record.finish_reason = choices[0].get("finish_reason") or record.finish_reason
                if usage := chunk.get("usage"):
                    usage_tokens = usage.get("completion_tokens")
                    record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
    except (StreamError, ValueError) as exc:
        record.error = str(exc) or type(exc).__name__
        return record
    if record.ttft_s is None:
        record.error = "the stream ended without a token"
        return record
    record.e2e_s = last - started
    record.output_tokens, record.output_tokens_from = (
        (usage_tokens, "usage") if usage_tokens is not None else (chunks, "chunks"))
    record.success = True
    return record


async def warm_up(conn: StreamConnection, cfg: BenchConfig, model: str,
                  prompts: list[Prompt], out) -> bool:
    """Send the warm-up requests; return whether the server takes ``ignore_eos``.

    A server that rejects the field (plain OpenAI-compatible servers may) is
    asked again without it, and the bench goes on without it, saying so.
    """
    ignore_eos = cfg.ignore_eos
    # A few tokens show that the server works; a long warm-up reply would only cost time.
    prompts = [replace(p, max_tokens=min(p.max_tokens, WARMUP_MAX_TOKENS)) for p in prompts]
    for i, prompt in enumerate(prompts):
        record = RequestRecord(-1, 0, prompt.prompt_tokens, prompt.max_tokens)
        await send(conn, completion_body(model, prompt, ignore_eos, cfg.temperature), record)
        if not record.success and i == 0 and ignore_eos and record.error.startswith("HTTP 4"):
            ignore_eos = False
            record = RequestRecord(-1, 0, prompt.prompt_tokens, prompt.max_tokens)
            await send(conn, completion_body(model, prompt, False, cfg.temperature), record)
            if record.success:
                out("[bench] the server rejects ignore_eos: replies may end before max_tokens")
        if not record.success:
            raise BenchError(f"The warm-up request to {cfg.url} failed: {record.error}")
    return ignore_eos


# --- one concurrency level ----------------------------------------------------------

def progress_text(records: list[RequestRecord], total: int, concurrency: int, width: int = 20) -> str:
    finished = [r for r in records if r.success or r.error]
    filled = round(width * len(finished) / total) if total else width
    failed = sum(1 for r in finished if not r.success)
    tokens = sum(r.output_tokens for r in finished)
    return (f"concurrency {concurrency} [{'#' * filled}{'.' * (width - filled)}] "
            f"{len(finished)}/{total}  {tokens} tokens" + (f"  {failed} failed" if failed else ""))


async def run_level(cfg: BenchConfig, model: str, prompts: list[Prompt], concurrency: int,
                    ignore_eos: bool, deadline: float,
                    status: StatusLine) -> tuple[list[RequestRecord], float]:
    """All ``prompts`` with at most ``concurrency`` in flight, stopped at ``deadline``.

    Requests still running at the deadline are cancelled (which closes their
    streams) and recorded as failed; ones never started are not recorded.
    """
    records: list[RequestRecord] = []
    todo = iter(enumerate(prompts))  # shared by the workers: each prompt is taken once
    started = time.perf_counter()

    async def worker() -> None:
        conn = StreamConnection(cfg.url, cfg.api_key, cfg.request_timeout_s)
        try:
            for index, prompt in todo:
                if time.monotonic() >= deadline:
                    return
                record = RequestRecord(index, concurrency, prompt.prompt_tokens, prompt.max_tokens,
                                       start_s=time.perf_counter() - started)
                records.append(record)
                await send(conn, completion_body(model, prompt, ignore_eos, cfg.temperature), record)
        finally:
            conn.close()

    async def tick() -> None:
        while True:
            status.update(progress_text(records, len(prompts), concurrency))
            await asyncio.sleep(0.5)

    ticker = asyncio.create_task(tick())
    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(prompts)))]
    _, late = await asyncio.wait(workers, timeout=max(0.0, deadline - time.monotonic()))
    for task in [*late, ticker]:
        task.cancel()
    await asyncio.gather(*late, ticker, return_exceptions=True)
    duration = time.perf_counter() - started
    for record in records:
        if not record.success and not record.error:
            record.error = "cancelled at the time limit (--max-seconds)"
    return records, duration


# --- the whole run ---------------------------------------------------------------------

async def server_counters(cfg: BenchConfig) -> Optional[EngineMetrics]:
    """vLLM's own counters (server.metrics.EngineMetrics); None without its /metrics."""
    try:
        from server.metrics import fetch_metrics_async
        async with httpx.AsyncClient(timeout=5.0, headers=auth_headers(cfg.api_key)) as http:
            return await fetch_metrics_async(http, cfg.url)
    except (ImportError, httpx.HTTPError, ValueError):
        return None


def server_view(before: Optional[EngineMetrics], after: Optional[EngineMetrics]) -> dict:
    """What the engine itself measured during a level: prefix-cache hits and its latencies.

    Next to the client's figures they split a request's time between the engine and the
    HTTP front end, which is what decides whether tuning the engine can help.
    """
    if before is None or after is None:
        return {"prefix_cache_hit_rate": None}
    from server.metrics import mean_between
    to_ms = lambda s: None if s is None else s * 1000
    return {
        "prefix_cache_hit_rate": hit_rate((before.prefix_cache_queries, before.prefix_cache_hits),
                                          (after.prefix_cache_queries, after.prefix_cache_hits)),
        "server_ttft_ms_mean": to_ms(mean_between(before.ttft, after.ttft)),
        "server_e2e_ms_mean": to_ms(mean_between(before.e2e, after.e2e)),
        "server_queue_ms_mean": to_ms(mean_between(before.queue, after.queue)),
    }


def mostly_cached(summary: dict) -> bool:
    """Whether the prefix cache served so many prompt tokens that TTFT is a cached prompt's."""
    return (summary.get("prefix_cache_hit_rate") or 0) > PREFIX_HIT_WARNING


def hit_rate(before: Optional[tuple[int, int]], after: Optional[tuple[int, int]]) -> Optional[float]:
    """The share of prompt tokens served from the prefix cache between two readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


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


async def run_bench(cfg: BenchConfig, out=print, prompts_file: Optional[Path] = None) -> dict:
    """Every concurrency level of ``cfg``; the result as saved in bench.json.

    ``cfg.max_seconds`` bounds the load itself, from the first measured request on;
    building the prompts and the warm-up come before it.  ``prompts_file`` receives the
    measured prompts, so that another tool can send exactly the same load.
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    levels = list(cfg.concurrencies)
    status = StatusLine("bench")
    # Every level gets prompts of its own: repeated ones would be served from the prefix cache.
    model, max_model_len, prompts, counted_by = await prepare(
        cfg, cfg.load.num_prompts * len(levels) + cfg.warmup, random.Random(cfg.load.seed), status)
    if prompts_file is not None:
        prompts_file.parent.mkdir(parents=True, exist_ok=True)
        prompts_file.write_text(prompts_sharegpt(prompts[cfg.warmup:]), encoding="utf-8")
    conn = StreamConnection(cfg.url, cfg.api_key, cfg.request_timeout_s)
    try:
        ignore_eos = await warm_up(conn, cfg, model, prompts[:cfg.warmup], out)
    finally:
        conn.close()
    deadline = time.monotonic() + cfg.max_seconds
    status.done(f"{model} at {cfg.url}: {len(prompts) - cfg.warmup} prompts ready, "
                f"lengths counted by the {counted_by}")
    results = []
    for n, concurrency in enumerate(levels):
        if time.monotonic() >= deadline:
            skipped = ", ".join(map(str, levels[n:]))
            out(f"[bench] time limit reached: concurrency {skipped} not run")
            break
        first = cfg.warmup + n * cfg.load.num_prompts
        status = StatusLine("bench")
        server_before = await server_counters(cfg)
        cpu_before = time.process_time()
        records, duration = await run_level(
            cfg, model, prompts[first:first + cfg.load.num_prompts], concurrency,
            ignore_eos, deadline, status)
        summary = summarize(records, duration, cfg.slo)
        summary.update(server_view(server_before, await server_counters(cfg)))
        # A saturated client measures itself, not the server: say so in the result.
        summary["client_cpu_fraction"] = (time.process_time() - cpu_before) / duration
        summary["not_sent"] = cfg.load.num_prompts - len(records)
        status.done(progress_text(records, cfg.load.num_prompts, concurrency)
                    + f" in {duration:.1f} s")
        results.append({"concurrency": concurrency, "summary": summary,
                        "records": [r.as_dict() for r in records]})
    return {
        "kind": "ernie-chat bench",
        "started": started,
        "target": {"url": cfg.url, "model": model, "max_model_len": max_model_len},
        "params": {**cfg.as_dict(), "ignore_eos_sent": ignore_eos, "prompt_lengths": counted_by},
        "levels": results,
    }


# --- results ---------------------------------------------------------------------------

def one_decimal(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(result: dict) -> str:
    """One line per concurrency level, vLLM's figures in its units."""
    head = (f"{'conc':>5} {'done':>5} {'fail':>5} {'req/s':>7} {'out tok/s':>10} {'tot tok/s':>10} "
            f"{'goodput':>8} | {'TTFT ms mean/p50/p99':>22} | {'TPOT ms mean/p50/p99':>20} | "
            f"{'ITL ms mean/p50/p99':>20} | {'E2E ms mean/p50/p99':>24}")
    lines = [head, "-" * len(head)]
    for level in result["levels"]:
        s = level["summary"]
        trio = lambda d: "/".join(one_decimal(d[k]) for k in ("mean", "median", "p99"))
        lines.append(
            f"{level['concurrency']:>5} {s['completed']:>5} {s['failed']:>5} "
            f"{s['request_throughput']:>7.2f} {s['output_throughput']:>10.1f} "
            f"{s['total_token_throughput']:>10.1f} {s['goodput']:>8.2f} | {trio(s['ttft_ms']):>22} | "
            f"{trio(s['tpot_ms']):>20} | {trio(s['itl_ms']):>20} | {trio(s['e2e_ms']):>24}")
    slo = result["levels"][0]["summary"]["slo"]["text"] if result["levels"] else ""
    lines.append(f"goodput: requests/s with {slo}")
    cached = {l["concurrency"]: l["summary"].get("prefix_cache_hit_rate") for l in result["levels"]}
    if any(rate is not None for rate in cached.values()):
        lines.append("prompt tokens served from the prefix cache: " + ", ".join(
            f"{'-' if rate is None else f'{rate:.1%}'} at concurrency {c}" for c, rate in cached.items()))
    engine_side = [l for l in result["levels"] if l["summary"].get("server_ttft_ms_mean") is not None]
    if engine_side:
        lines.append("the engine's own view (vLLM's /metrics, timed from the tokenized request on: "
                     "the rest of the client's time is the HTTP front end and the network):")
        lines.append(f"{'conc':>5}  {'mean TTFT ms engine/client':>27}  {'queued ms':>9}  "
                     f"{'mean E2E ms engine/client':>26}")
        for level in engine_side:
            s = level["summary"]
            lines.append(f"{level['concurrency']:>5}  {one_decimal(s['server_ttft_ms_mean']):>12} / "
                         f"{one_decimal(s['ttft_ms']['mean']):<12}  {one_decimal(s['server_queue_ms_mean']):>9}  "
                         f"{one_decimal(s['server_e2e_ms_mean']):>11} / {one_decimal(s['e2e_ms']['mean']):<12}")
    if any(mostly_cached(l["summary"]) for l in result["levels"]):
        lines.append("WARNING: the server's prefix cache served many prompt tokens: TTFT is that "
                     "of cached prompts, not of new ones.")
    busy = [l["concurrency"] for l in result["levels"] if l["summary"]["client_cpu_fraction"] > 0.9]
    if busy:
        lines.append(f"WARNING: this client used over 90% of a CPU core at concurrency {busy}: "
                     "it may be the bottleneck, not the server.")
    return "\n".join(lines)


def csv_row(record: dict) -> dict:
    to_ms = lambda v: None if v is None else round(v * 1000, 3)
    itl = record["itl_s"]
    return {**{k: record[k] for k in CSV_FIELDS if k in record},
            "ttft_ms": to_ms(record["ttft_s"]), "tpot_ms": to_ms(record["tpot_s"]),
            "e2e_ms": to_ms(record["e2e_s"]), "start_s": round(record["start_s"], 4),
            "itl_mean_ms": to_ms(sum(itl) / len(itl)) if itl else None}


def save(result: dict, out_dir: Path, plots: bool = True, out=print) -> list[Path]:
    """bench.json (everything), requests.csv (one row per request) and the PNG plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "bench.json", out_dir / "requests.csv"
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for level in result["levels"]:
            writer.writerows(csv_row(r) for r in level["records"])
    return [json_path, csv_path] + (draw_plots(result, out_dir, out) if plots else [])


def draw_plots(result: dict, out_dir: Path, out=print) -> list[Path]:
    try:
        from server import bench_plot
    except ImportError as exc:  # the GPU machine has no matplotlib: draw them later
        out(f"[bench] plots skipped ({exc}); draw them elsewhere with "
            f"`ernie-chat bench --plot-only {out_dir / 'bench.json'}`")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    return bench_plot.plot_bench(result, out_dir)


def vllm_comparison(result: dict, vllm: dict) -> list[dict]:
    """Our figures next to a `vllm bench serve --save-result` JSON of the same load."""
    concurrency = vllm.get("max_concurrency")
    level = next((l for l in result["levels"] if l["concurrency"] == concurrency),
                 result["levels"][-1])
    s = level["summary"]
    pairs = [("request throughput (req/s)", s["request_throughput"], vllm.get("request_throughput")),
             ("output throughput (tok/s)", s["output_throughput"], vllm.get("output_throughput")),
             ("total token throughput (tok/s)", s["total_token_throughput"],
              vllm.get("total_token_throughput")),
             ("mean TTFT (ms)", s["ttft_ms"]["mean"], vllm.get("mean_ttft_ms")),
             ("median TTFT (ms)", s["ttft_ms"]["median"], vllm.get("median_ttft_ms")),
             ("mean TPOT (ms)", s["tpot_ms"]["mean"], vllm.get("mean_tpot_ms")),
             ("mean ITL (ms)", s["itl_ms"]["mean"], vllm.get("mean_itl_ms")),
             ("mean E2E (ms)", s["e2e_ms"]["mean"], vllm.get("mean_e2el_ms"))]
    # vLLM saves E2E only with --percentile-metrics ...,e2el.
    return [{"figure": name, "ours": ours, "vllm": theirs,
             "difference_percent": percent_difference(ours, theirs)}
            for name, ours, theirs in pairs if theirs is not None]


def render_comparison(rows: list[dict]) -> str:
    lines = [f"{'figure':<32}{'ours':>12}{'vllm bench':>12}{'diff':>9}"]
    for row in rows:
        diff = "-" if row["difference_percent"] is None else f"{row['difference_percent']:+.1f}%"
        ours, theirs = one_decimal(row["ours"]), one_decimal(row["vllm"])
        lines.append(f"{row['figure']:<32}{ours:>12}{theirs:>12}{diff:>9}")
    return "\n".join(lines)


# --- the command line -------------------------------------------------------------------

def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("every value must be at least 1")
    return values


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that describe the load; `tune` runs the same load at every point."""
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", type=int_list, default=(4,),
                      help="requests in flight; a comma list sweeps (1,4,16). Default 4")
    load.add_argument("--num-prompts", type=int, default=Load.num_prompts,
                      help=f"requests per concurrency level (default {Load.num_prompts})")
    load.add_argument("--input-len", type=int, default=Load.input_len,
                      help=f"prompt tokens (default {Load.input_len})")
    load.add_argument("--output-len", type=int, default=Load.output_len,
                      help=f"reply tokens, max_tokens (default {Load.output_len})")
    load.add_argument("--range-ratio", type=float, default=0.0,
                      help="draw lengths uniformly in [len x (1-r), len x (1+r)], as vLLM")
    load.add_argument("--from-usage", nargs="?", const="", metavar="FILE",
                      help="draw (prompt, reply) lengths from recorded chats (default ERNIE_USAGE_LOG)")
    load.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                      help="let replies end at EOS (default: send ignore_eos so every reply is "
                           "--output-len long)")
    load.add_argument("--temperature", type=float, help="default: the server's")
    load.add_argument("--slo-ttft-ms", type=float, help="goodput counts requests with TTFT at most this")
    load.add_argument("--slo-tpot-ms", type=float, help="goodput counts requests with TPOT at most this")
    load.add_argument("--max-seconds", type=float, default=600.0,
                      help="stop the load after this long; requests still running are cancelled "
                           "(default 600)")
    load.add_argument("--request-timeout-s", type=float, default=300.0,
                      help="give up on a request after this long without a chunk (default 300)")
    load.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    load.add_argument("--seed", type=int, default=0)


def config_from_args(args: argparse.Namespace, settings, url: str, model: Optional[str] = None,
                     api_key: Optional[str] = None) -> BenchConfig:
    from_usage = None
    if args.from_usage is not None:
        from_usage = Path(args.from_usage) if args.from_usage else settings.usage_log
    if args.num_prompts < 1 or args.input_len < 1 or args.output_len < 1 or args.max_seconds <= 0:
        raise BenchError("--num-prompts, --input-len, --output-len and --max-seconds must be positive.")
    if not 0 <= args.range_ratio < 1:
        raise BenchError("--range-ratio must be in [0, 1).")
    return BenchConfig(
        url=url.rstrip("/").removesuffix("/v1"), api_key=api_key, model=model,
        concurrencies=args.concurrency,
        load=Load(args.num_prompts, args.input_len, args.output_len, args.range_ratio,
                  from_usage, args.seed),
        ignore_eos=args.ignore_eos, max_seconds=args.max_seconds,
        request_timeout_s=args.request_timeout_s, warmup=max(0, args.warmup),
        temperature=args.temperature, slo=Slo(args.slo_ttft_ms, args.slo_tpot_ms))


def add_parser(sub) -> None:
    bench = sub.add_parser(
        "bench", help="load-test the engine (TTFT, TPOT, throughput, goodput)",
        description="Streaming load test against an OpenAI-compatible server: our engine "
        "(ERNIE_ENGINE_URL / port) or --url. Writes bench.json, requests.csv and PNG plots.")
    bench.add_argument("--url", help="server base URL (default: the engine of the settings)")
    bench.add_argument("--model", help="served model name (default: the server's first model)")
    bench.add_argument("--api-key", help="default: ERNIE_API_KEY")
    bench.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    bench.add_argument("--no-plots", action="store_true", help="write JSON and CSV only")
    bench.add_argument("--save-prompts", action="store_true",
                       help="also write prompts.json, the measured prompts, so that `vllm bench "
                       "serve --dataset-name sharegpt --dataset-path prompts.json "
                       "--sharegpt-output-len N --disable-shuffle` sends the same load")
    bench.add_argument("--plot-only", type=Path, metavar="RESULT.json",
                       help="draw the plots (and print the table) of a saved result; sends nothing")
    bench.add_argument("--compare-vllm", type=Path, metavar="VLLM.json",
                       help="compare with a `vllm bench serve --save-result` JSON of the same load")
    bench.add_argument("--app-overhead", action="store_true",
                       help="instead of a load test: time the chat app's streaming path against "
                            "reading the engine's stream directly")
    bench.add_argument("--repetitions", type=int, default=10,
                       help="--app-overhead: alternating runs of each path (default 10)")
    add_load_arguments(bench)
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        # Read first: a typo in its path should not cost a whole run.
        vllm = load_json(args.compare_vllm, "--compare-vllm") if args.compare_vllm else None
        if args.plot_only:
            return show_saved(load_json(args.plot_only, "--plot-only"), vllm, args)
        from server.settings import load_settings
        settings = load_settings()
        url = args.url or settings.engine_base_url
        check_target(url, explicit=bool(args.url))
        cfg = config_from_args(args, settings, url, args.model, args.api_key or settings.api_key_value)
        out_dir = args.out or RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S")
        if args.app_overhead:
            from server import app_overhead
            return app_overhead.run(cfg, settings, args.repetitions, out_dir)
        result = asyncio.run(run_bench(cfg, prompts_file=out_dir / "prompts.json"
                                       if args.save_prompts else None))
    except BenchError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    result["command_line"] = shlex.join(sys.argv)
    result["arguments"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                           if k not in ("func", "api_key")}
    print(render(result))
    if vllm is not None:
        result["vllm_comparison"] = vllm_comparison(result, vllm)
        print("\n" + render_comparison(result["vllm_comparison"]))
    for path in save(result, out_dir, plots=not args.no_plots):
        print(f"wrote {path}")
    completed = sum(l["summary"]["completed"] for l in result["levels"])
    return 0 if completed else 1


def load_json(path: Path, flag: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"{flag} {path}: cannot read it as JSON ({exc})") from None


def show_saved(result: dict, vllm: Optional[dict], args: argparse.Namespace) -> int:
    """--plot-only: the table and plots of an earlier run, e.g. one made on a GPU machine."""
    print(render(result))
    if vllm is not None:
        print("\n" + render_comparison(vllm_comparison(result, vllm)))
    for path in draw_plots(result, args.out or args.plot_only.parent):
        print(f"wrote {path}")
    return 0

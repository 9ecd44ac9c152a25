"""A fast stand-in for vLLM's OpenAI server, for measuring the chat app's own CPU per token.

``bench --app-cost`` against a real engine measures the app at the engine's pace: the
2-core CPU engine gives a chat 5-40 tokens/s, far below what a GPU gives a crowd (~50 per
chat, thousands per app worker). This upstream streams at a set rate per reply, costs
little itself (each chunk is a few string joins and one socket write, on plain asyncio
streams), and sends what vLLM sends to the app, so the app's work per token is the work it
does in production:

* ``GET /v1/models`` with ``owned_by: vllm`` and ``max_model_len`` (the app then sends
  vLLM's own fields and counts with ``/tokenize``), ``POST /tokenize`` (a count of
  whitespace-separated words, 3 per message; a ``prompt``'s words as ids, which ``POST
  /detokenize`` joins back, so that ``bench`` builds its prompts here), ``GET /metrics`` (the
  gauges the app reads), ``GET /health``;
* ``POST /v1/chat/completions`` with ``stream: true``: one HTTP chunk per SSE event, as
  uvicorn sends vLLM's; the role chunk, then the first token alone and ``N`` tokens per
  chunk after it (N: the request's ``stream_interval``, as vLLM 0.32 reads it, else
  ``--stream-interval``, vLLM's engine-wide flag, default 1: one token per chunk; give the
  app ``ERNIE_STREAM_INTERVAL_MAX=1`` to keep it from asking), each with the running usage when
  ``continuous_usage_stats`` is asked (as the app does), the finish chunk, the final usage
  chunk, ``[DONE]``. The chunks' fields and their order are vLLM 0.32's
  (``entrypoints/openai/chat_completion/serving.py``, ``model_dump_json(exclude_unset=True)``).
  Exactly ``max_tokens`` tokens, finish reason ``length``.
* ``POST /v1/completions`` with ``stream: true``, for ``bench`` and ``vllm bench serve``: ONE
  token per chunk, the first at once (no time spent on a prompt: what either tool then
  measures as TTFT is its own time and the wire's), the last with finish reason ``length``,
  then the usage chunk when ``include_usage`` is asked, ``[DONE]``; vLLM 0.32's fields
  (``entrypoints/openai/completion/serving.py``).

Not a test double for correctness (tests use a real vLLM): a load source for benchmarks.

    python -m server.loadtest.chat.fast_upstream --port 8199 --tokens-per-s 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Optional

MODEL = "fast-upstream"
WINDOW = 32768
# Tokens of about four characters, as a BPE tokenizer's are on English text.
WORDS = [" the", " of", " and", " model", " to", " in", " is", " that", " for", " it", " as", " with",
         " was", " on", " be", " at", " by", " this", " had", " not", " are", " but", " from", " or",
         " have", " an", " they", " which", " one", " you", " were", " her", " all", " she", " there",
         " would", " their", " we", " him", " been", " has", " when", " who", " will", " more", " no",
         ".", ",", " token", " stream", "ing", " chat", "s", " reply", " 42", " 中文", "\n\n", " **bold**"]
MAX_BODY = 4 * 2**20


def count(messages: list) -> int:
    """The stand-in's tokenizer: whitespace-separated words, and 3 per message."""
    return sum(3 + len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))


def event(data: str) -> bytes:
    """One SSE event as one HTTP/1.1 chunk of a chunked body."""
    payload = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def usage(prompt: int, done: int) -> str:
    return (f'"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt + done},'
            f'"completion_tokens":{done}}}')


def groups(tokens: int, interval: int) -> list[int]:
    """Tokens per streamed chunk: the first alone, then ``interval`` at a time, as vLLM's
    output processor sends them."""
    rest = tokens - 1
    return [1] + [interval] * (rest // interval) + ([rest % interval] if rest % interval else [])


def chunks(request_id: str, created: int, prompt: int, tokens: int, live_usage: bool, final_usage: bool,
           seed: int, interval: int = 1):
    """The stream's events in order (vLLM's JSON, field for field), lazily, each with the
    number of tokens it carries."""
    head = f'{{"id":"{request_id}","object":"chat.completion.chunk","created":{created},"model":"{MODEL}",'
    tail = lambda done: ("," + usage(prompt, done) if live_usage else "") + "}"
    yield event(head + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                '"finish_reason":null}]' + tail(0)), 0
    done = 0
    for size in groups(tokens, interval):
        text = json.dumps("".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(done, done + size)),
                          ensure_ascii=False)
        done += size
        yield event(head + f'"choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,'
                    f'"finish_reason":null,"token_ids":null}}]' + tail(done)), size
    yield event(head + '"choices":[{"index":0,"delta":{"content":""},"logprobs":null,'
                '"finish_reason":"length","stop_reason":null,"token_ids":null}]' + tail(tokens)), 0
    if final_usage:
        yield event(head + '"choices":[],' + usage(prompt, tokens) + "}"), 0
    yield event("[DONE]"), 0
    yield b"0\r\n\r\n", 0


def completion_chunks(request_id: str, created: int, prompt: int, tokens: int, final_usage: bool, seed: int):
    """A streamed completion's events in order (vLLM's JSON, field for field), lazily, each
    with the number of tokens it carries."""
    head = f'{{"id":"{request_id}","object":"text_completion","created":{created},"model":"{MODEL}",'
    for i in range(tokens):
        text = json.dumps(WORDS[(seed + i * 7) % len(WORDS)], ensure_ascii=False)
        finish = '"length"' if i == tokens - 1 else "null"
        yield event(head + f'"choices":[{{"index":0,"text":{text},"logprobs":null,"finish_reason":{finish},'
                    f'"stop_reason":null}}]}}'), 1
    if final_usage:
        yield event(head + '"choices":[],' + usage(prompt, tokens) + "}"), 0
    yield event("[DONE]"), 0
    yield b"0\r\n\r\n", 0


METRICS = ("vllm:num_requests_running{{model_name=\"{m}\"}} {running}\n"
           "vllm:num_requests_waiting{{model_name=\"{m}\"}} 0\n"
           "vllm:kv_cache_usage_perc{{model_name=\"{m}\"}} 0.01\n")


class Upstream:
    def __init__(self, tokens_per_s: float, stream_interval: int = 1):
        self.every_s, self.stream_interval = 1.0 / tokens_per_s, stream_interval
        self.running = 0
        self.requests = 0
        self.vocabulary: dict[str, int] = {}  # the stand-in tokenizer's ids: words as first seen
        self.words: list[str] = []

    def word_ids(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self.vocabulary:
                self.vocabulary[word] = len(self.words)
                self.words.append(word)
            ids.append(self.vocabulary[word])
        return ids

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self.one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        body = json.loads(await reader.readexactly(length)) if length else {}
        path = path.split("?")[0]
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions") and body.get("stream"):
            await self.stream(path, body, writer)
        elif method == "GET" and path == "/v1/models":
            self.reply(writer, 200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                                   "owned_by": "vllm", "max_model_len": WINDOW}]})
        elif method == "POST" and path == "/tokenize" and isinstance(body.get("prompt"), str):
            ids = self.word_ids(body["prompt"])
            self.reply(writer, 200, {"count": len(ids), "max_model_len": WINDOW, "tokens": ids})
        elif method == "POST" and path == "/tokenize":
            self.reply(writer, 200, {"count": count(body.get("messages") or []), "max_model_len": WINDOW,
                                     "tokens": []})
        elif method == "POST" and path == "/detokenize":
            known = [self.words[i] for i in body.get("tokens") or [] if isinstance(i, int) and 0 <= i < len(self.words)]
            self.reply(writer, 200, {"prompt": " ".join(known)})
        elif method == "GET" and path == "/metrics":
            self.reply(writer, 200, METRICS.format(m=MODEL, running=self.running), "text/plain")
        elif method == "GET" and path == "/health":
            self.reply(writer, 200, "", "text/plain")
        else:
            self.reply(writer, 404, {"error": {"message": f"{method} {path}: not served here"}})
        await writer.drain()
        return headers.get("connection", "").lower() != "close"

    @staticmethod
    def reply(writer: asyncio.StreamWriter, status: int, content, kind: str = "application/json") -> None:
        data = (content if isinstance(content, str) else json.dumps(content)).encode()
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
                     + data)

    async def stream(self, path: str, body: dict, writer: asyncio.StreamWriter) -> None:
        options = body.get("stream_options") or {}
        self.requests += 1
        tokens = max(1, min(int(body.get("max_tokens") or 16), WINDOW))
        if path == "/v1/completions":
            events = completion_chunks(f"cmpl-{self.requests}", int(time.time()), len(str(body.get("prompt")).split()),
                                       tokens, bool(options.get("include_usage")), self.requests)
        else:
            events = chunks(f"chatcmpl-{self.requests}", int(time.time()), count(body.get("messages") or []),
                            tokens, bool(options.get("continuous_usage_stats")), bool(options.get("include_usage")),
                            self.requests, requested_interval(body) or self.stream_interval)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        self.running += 1
        try:
            first, _ = next(events)  # the role chunk, or a completion's first token, at once
            writer.write(first)
            await writer.drain()
            loop = asyncio.get_running_loop()
            due = loop.time()
            for piece, size in events:
                due += max(size, 1) * self.every_s
                # A late tick sends at once (a loaded machine catches up, as a GPU batch does).
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                writer.write(piece)
                await writer.drain()
        finally:
            self.running -= 1


def requested_interval(body: dict) -> Optional[int]:
    """The request's own ``stream_interval`` (vLLM 0.32's per-request field), when valid."""
    value = body.get("stream_interval")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


async def serve(host: str, port: int, tokens_per_s: float, ready: Optional[asyncio.Event] = None,
                stream_interval: int = 1) -> None:
    upstream = Upstream(tokens_per_s, stream_interval)
    server = await asyncio.start_server(upstream.handle, host, port, backlog=1024)
    print(f"fast upstream at http://{host}:{port}: {tokens_per_s:g} tokens/s per reply, "
          f"{stream_interval} per chunk unless a request asks", flush=True)
    if ready:
        ready.set()
    async with server:
        await server.serve_forever()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-s", type=float, default=50.0, help="per reply (default 50)")
    parser.add_argument("--stream-interval", type=int, default=1,
                        help="tokens per chunk after the first, as vLLM's flag (default 1); a "
                        "request's own stream_interval wins")
    args = parser.parse_args(argv)
    if not 0 < args.tokens_per_s <= 100_000:
        parser.error("--tokens-per-s must be in (0, 100000]")
    if not 1 <= args.stream_interval <= 1024:
        parser.error("--stream-interval must be in [1, 1024]")
    try:
        asyncio.run(serve(args.host, args.port, args.tokens_per_s, stream_interval=args.stream_interval))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

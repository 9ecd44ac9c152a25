"""The benchmarks' fast stand-in for vLLM (server/loadtest/chat/fast_upstream.py): its streamed
completions are vLLM's, event for event, as both `bench` and `vllm bench serve` read them."""

from __future__ import annotations

import json

from server.loadtest.chat.fast_upstream import MODEL, completion_chunks


def events(stream) -> list[str]:
    """The data lines of an HTTP/1.1 chunked SSE body."""
    body = b"".join(stream)
    data, rest = [], body
    while True:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return data
        chunk, rest = rest[:n], rest[n + 2:]
        data += [line[len("data: "):] for line in chunk.decode().split("\n") if line.startswith("data: ")]


def test_a_streamed_completion_is_one_token_a_chunk_then_its_usage_and_done():
    data = events(completion_chunks("cmpl-7", 1700000000, 5, 4, True, 7))
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    tokens, usage = chunks[:-1], chunks[-1]
    assert all(c["object"] == "text_completion" and c["model"] == MODEL and c["id"] == "cmpl-7" for c in chunks)
    assert [len(c["choices"]) for c in tokens] == [1, 1, 1, 1] and all(c["choices"][0]["text"] for c in tokens)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, None, "length"]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 4,
                                                         "total_tokens": 9}


def test_without_include_usage_no_usage_chunk_is_sent():
    data = events(completion_chunks("cmpl-1", 0, 3, 2, False, 1))
    assert len(data) == 3 and all("usage" not in d for d in data)

"""The benchmarks' fast stand-in for vLLM (server/loadtest/chat/fast_upstream.py): its streamed
completions are vLLM's, event for event, as both `bench` and `vllm bench serve` read them."""

from __future__ import annotations

import json

from server.loadtest.chat.fast_upstream import MODEL, chunks, completion_chunks, groups, requested_interval


def events(stream) -> list[str]:
    """The data lines of an HTTP/1.1 chunked SSE body."""
    body = b"".join(piece for piece, _ in stream)
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


def test_grouped_tokens_come_first_alone_then_n_a_chunk_with_the_same_text():
    def stream(interval):
        data = events(chunks("chatcmpl-3", 0, 9, 10, True, True, 3, interval))
        parsed = [json.loads(d) for d in data[:-1]]
        texts = [c["choices"][0]["delta"].get("content") for c in parsed if c["choices"]]
        return texts[1:-1], parsed[-1]["usage"]  # between the role chunk and the finish chunk
    one, usage_one = stream(1)
    four, usage_four = stream(4)
    assert len(one) == 10 and len(four) == 4  # 1 + 4 + 4 + 1
    assert "".join(four) == "".join(one) and four[0] == one[0]
    assert usage_four == usage_one == {"prompt_tokens": 9, "completion_tokens": 10, "total_tokens": 19}
    assert groups(10, 4) == [1, 4, 4, 1] and groups(1, 8) == [1] and groups(9, 4) == [1, 4, 4]


def test_only_a_whole_positive_stream_interval_is_taken_from_a_request():
    assert requested_interval({"stream_interval": 8}) == 8
    assert [requested_interval({"stream_interval": v}) for v in (0, -2, True, "8", 2.5, None)] == [None] * 6
    assert requested_interval({}) is None

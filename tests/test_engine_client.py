"""app/engine_client.sse_chunk: the chat's reader of the engine's event stream (pure)."""

from __future__ import annotations

import openai
import pytest

from app.engine_client import error_kind, sse_chunk


def test_data_lines_are_decoded_and_everything_else_skipped():
    assert sse_chunk('data: {"choices": [{"delta": {"content": "Hi"}}]}') == {
        "choices": [{"delta": {"content": "Hi"}}]}
    assert sse_chunk('data:{"usage": {"completion_tokens": 3}}') == {"usage": {"completion_tokens": 3}}
    for line in ("", ": keep-alive comment", "event: message", "data: [DONE]", "data:"):
        assert sse_chunk(line) is None, line


def test_an_error_inside_a_200_stream_raises_like_the_sdk():
    with pytest.raises(openai.APIError, match="engine died") as info:
        sse_chunk('data: {"error": {"message": "engine died", "type": "InternalServerError"}}')
    assert info.value.body == {"message": "engine died", "type": "InternalServerError"}
    assert error_kind(info.value) == "engine_error"
    with pytest.raises(openai.APIError, match="An error occurred during streaming"):
        sse_chunk('data: {"error": "boom"}')


def test_a_broken_line_is_an_error_not_a_silent_gap():
    with pytest.raises(ValueError):
        sse_chunk('data: {"choices": [')

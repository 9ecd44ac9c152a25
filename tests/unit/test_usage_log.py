"""server/usage_log.py: the token-count log behind `plan --from-usage`."""

from __future__ import annotations

import json

import pytest

from server.usage_log import append_usage, read_usage


def test_append_then_read_round_trip(tmp_path):
    path = tmp_path / "nested" / "usage.jsonl"          # parent folders are created
    append_usage(path, 120, 45, ttft_s=0.25, tokens_per_s=80.5, finish_reason="stop")
    append_usage(path, 0, 0)
    append_usage(path, 4000, 512, finish_reason="length")

    records, skipped = read_usage(path)
    assert skipped == 0
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in records] == \
        [(120, 45), (0, 0), (4000, 512)]
    assert records[0]["ttft_s"] == 0.25
    assert records[0]["tokens_per_s"] == 80.5
    assert records[0]["finish_reason"] == "stop"
    assert records[1]["finish_reason"] is None
    assert all("time" in r for r in records)
    assert "at" not in records[0]


def test_stamps_are_kept_as_given(tmp_path):
    path = tmp_path / "usage.jsonl"
    append_usage(path, 10, 5, at={"message": 100.5, "request": 100.52, "first_token": 100.9})
    assert read_usage(path)[0][0]["at"] == {"message": 100.5, "request": 100.52, "first_token": 100.9}


def test_one_line_per_record_and_no_text(tmp_path):
    path = tmp_path / "usage.jsonl"
    append_usage(path, 1, 2)
    append_usage(path, 3, 4)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert set(json.loads(lines[0])) == {"time", "prompt_tokens", "completion_tokens", "ttft_s",
                                         "tokens_per_s", "finish_reason"}


def test_corrupt_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "usage.jsonl"
    append_usage(path, 100, 10)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("this is not json\n")                                    # garbage
        handle.write('{"prompt_tokens": 5, "completion_tok\n')                # truncated
        handle.write('{"prompt_tokens": -1, "completion_tokens": 3}\n')       # negative
        handle.write('{"prompt_tokens": 7, "completion_tokens": -3}\n')       # negative
        handle.write('{"prompt_tokens": "100", "completion_tokens": 3}\n')    # string
        handle.write('{"prompt_tokens": 1.5, "completion_tokens": 3}\n')      # float
        handle.write('{"completion_tokens": 3}\n')                            # missing field
        handle.write("[1, 2]\n")                                              # not an object
        handle.write("42\n")                                                  # not an object
        handle.write("\n   \n")                                               # blank: ignored
    append_usage(path, 200, 20)
    with open(path, "ab") as handle:
        handle.write(b"\x00\xff\xfe\x80\x81binary junk\x07\n")               # binary junk
    append_usage(path, 300, 30)

    records, skipped = read_usage(path)
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in records] == \
        [(100, 10), (200, 20), (300, 30)]
    assert skipped == 10


def test_only_corrupt_lines_gives_no_records(tmp_path):
    path = tmp_path / "usage.jsonl"
    path.write_bytes(b"\xde\xad\xbe\xef\nnot json\n")
    assert read_usage(path) == ([], 2)


def test_empty_file_gives_no_records(tmp_path):
    path = tmp_path / "usage.jsonl"
    path.write_text("")
    assert read_usage(path) == ([], 0)


def test_missing_file_raises_clear_error(tmp_path):
    path = tmp_path / "does-not-exist.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        read_usage(path)
    assert str(path) in str(info.value)
    assert "usage log" in str(info.value).lower()

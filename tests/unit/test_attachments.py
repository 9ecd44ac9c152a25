"""app/conversation/attachments.py: what an attached file gives the prompt, or why it is refused.

The files are real (tests/support/sample_files.py builds PDFs, a PNG, legacy-encoded text);
the browser test attaches some of them through Chainlit's upload.
"""

from __future__ import annotations

import pytest

from app.conversation.attachments import Attachment, Refused, prompt_with, read_attachment, read_files
from app.conversation.pdf_reader import PdfLimits
from app.texts import refusal
from tests.support import sample_files as files

MB = 2**20
LIMIT = 10 * MB
PDF = PdfLimits(max_pages=300, memory_mb=512, timeout_s=20, max_text_chars=LIMIT)


def read(name: str, data: bytes, mime: str = "") -> Attachment:
    return read_attachment(name, mime, data, LIMIT, PDF)


def refused(name: str, data: bytes, mime: str = "") -> Refused:
    with pytest.raises(Refused) as info:
        read(name, data, mime)
    assert info.value.name == name
    return info.value


@pytest.mark.parametrize("name, mime, content", [
    ("notes.txt", "text/plain", "Meeting at 10.\nBring the slides."),
    ("README.md", "text/markdown", "# Title\n\n- a list"),
    ("prices.csv", "text/csv", "item,price\ntea,2.80\ncoffee,3.50\n"),
    ("data.json", "application/json", '{"a": [1, 2, 3], "名字": "值"}'),
    ("main.rs", "", 'fn main() {\n    println!("hi");\n}\n'),
    ("script.py", "text/x-python", "def f(x):\n\treturn x * 2\n"),
    ("id3.txt", "text/plain", "ID3 tags describe MP3 files."),  # starts like an MP3
])
def test_utf8_text_and_code_are_read_as_they_are(name, mime, content):
    attachment = read(name, content.encode(), mime)
    assert attachment == Attachment(name, content, "utf-8")
    assert not attachment.decoded_from_legacy


def test_a_byte_order_mark_names_the_encoding():
    assert read("bom.txt", "\ufeffhello".encode("utf-8")).text == "hello"
    utf16 = read("win.txt", "Grüße, 你好".encode("utf-16"))
    assert (utf16.text, utf16.encoding) == ("Grüße, 你好", "utf-16")


@pytest.mark.parametrize("text, encoding, assumed", [
    (files.CP1252_TEXT, "cp1252", "cp1252"),
    ("Café", "cp1252", "cp1252"),
    (files.GBK_TEXT, "gbk", "gb18030"),
    ("你好", "gbk", "gb18030"),
])
def test_legacy_encodings_are_detected_and_named(text, encoding, assumed):
    attachment = read("old.txt", text.encode(encoding), "text/plain")
    assert attachment.text == text
    assert attachment.encoding == assumed and attachment.decoded_from_legacy


def test_text_in_another_legacy_encoding_is_refused_not_garbled():
    problem = refused("jp.txt", "今日は良い天気ですね。散歩に行きましょう。".encode("shift_jis"))
    assert problem.reason == "file_encoding"
    assert "save it as UTF-8" in refusal("en", [problem])


def test_a_pdf_gives_its_text_layer():
    attachment = read("report.pdf", files.pdf_with_text(), "application/pdf")
    assert attachment.text == files.PDF_TEXT and attachment.encoding == "pdf"


def test_a_pdf_is_recognised_by_its_bytes_whatever_its_name():
    assert read("report.bin", files.pdf_with_text(), "application/octet-stream").text == files.PDF_TEXT


@pytest.mark.parametrize("name, data, mime, reason", [
    ("scan.pdf", files.scanned_pdf(), "application/pdf", "pdf_no_text"),
    ("broken.pdf", b"%PDF-1.4\nthis is not a PDF body", "application/pdf", "pdf_unreadable"),
    ("photo.png", files.png(), "image/png", "file_image"),
    ("photo.txt", files.png(), "text/plain", "file_image"),  # the bytes say image
    ("logo.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", "file_image"),
    ("archive.gz", files.gzip_bytes(), "application/gzip", "file_binary"),
    ("random.bin", bytes(range(256)) * 8, "application/octet-stream", "file_binary"),
    ("controls.txt", b"\x01\x02\x03\x04 abc \x05\x06\x07\x08" * 20, "text/plain", "file_binary"),
    ("empty.txt", b"", "text/plain", "file_empty"),
    ("blank.txt", b" \n\t\n", "text/plain", "file_empty"),
])
def test_what_cannot_go_into_the_prompt_is_refused_with_the_reason(name, data, mime, reason):
    problem = refused(name, data, mime)
    assert problem.reason == reason
    for lang in ("en", "zh"):
        assert name in refusal(lang, [problem])


def test_scan_refusal_counts_the_pages():
    problem = refused("scan.pdf", files.scanned_pdf(), "application/pdf")
    assert problem.values == {"pages": 1}
    assert "1 page(s)" in refusal("en", [problem])


def test_a_file_over_the_limit_is_refused_with_both_sizes():
    problem = refused("big.txt", b"a" * (LIMIT + 1))
    assert problem.reason == "file_too_big"
    assert problem.values == {"size_mb": "10.0", "limit_mb": "10"}


def test_read_files_refuses_a_huge_file_without_reading_it(tmp_path):
    big = tmp_path / "big.csv"
    with big.open("wb") as f:
        f.truncate(50 * 10**6)  # 50 MB, sparse
    small = tmp_path / "small.txt"
    small.write_text("fine")
    read, problems = read_files([("big.csv", "text/csv", big), ("small.txt", "text/plain", small)],
                                LIMIT, max_files=5, pdf=PDF)
    assert [a.name for a in read.values()] == ["small.txt"]
    assert [(p.name, p.reason, p.values["size_mb"]) for p in problems] == [("big.csv", "file_too_big", "47.7")]
    message = refusal("en", problems)
    assert "big.csv" in message and "47.7 MB" in message and "10 MB" in message


def test_read_files_refuses_more_files_than_allowed(tmp_path):
    paths = []
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text(str(i))
        paths.append((f"{i}.txt", "text/plain", tmp_path / f"{i}.txt"))
    read, problems = read_files(paths, LIMIT, max_files=2, pdf=PDF)
    assert read == {} and problems[0].reason == "too_many_files"
    assert "at most 2 files" in refusal("en", problems)


def test_a_file_named_many_times_is_read_once_and_counted_once(tmp_path):
    """A client may name one upload in a message any number of times: each name would be a read."""
    (tmp_path / "a.txt").write_text("alpha")
    named = [("a.txt", "text/plain", tmp_path / "a.txt")] * 50
    read, problems = read_files(named, LIMIT, max_files=2, pdf=PDF)
    assert problems == [] and read == {tmp_path / "a.txt": Attachment("a.txt", "alpha", "utf-8")}


def test_a_file_read_before_is_taken_as_read_and_a_deleted_one_is_named(tmp_path):
    """An edit sends its message's files again, deleted since they were read."""
    known = {tmp_path / "a.txt": Attachment("a.txt", "alpha", "utf-8")}
    read, problems = read_files([("a.txt", "text/plain", tmp_path / "a.txt"),
                                 ("b.txt", "text/plain", tmp_path / "b.txt")], LIMIT, 5, PDF, known)
    assert read == known and [(p.name, p.reason) for p in problems] == [("b.txt", "file_gone")]
    assert "**b.txt** is no longer on the server" in refusal("en", problems)


def test_every_bad_file_is_named_in_one_message():
    problems = [refused("a.png", files.png(), "image/png"), refused("b.txt", b"", "text/plain")]
    message = refusal("en", problems)
    assert "**a.png** is an image" in message and "**b.txt** is empty" in message
    assert "Your text is kept above" in message


def test_the_prompt_holds_the_typed_text_then_each_file():
    prompt = prompt_with("Summarise these.", [Attachment("a.txt", "alpha\n", "utf-8"),
                                              Attachment("b.pdf", "beta", "pdf")])
    assert prompt == ("Summarise these.\n\n--- a.txt ---\nalpha\n--- end of a.txt ---\n\n"
                      "--- b.pdf ---\nbeta\n--- end of b.pdf ---")
    assert prompt_with("just text", []) == "just text"
    assert prompt_with("  ", [Attachment("a.txt", "alpha", "utf-8")]).startswith("--- a.txt ---")

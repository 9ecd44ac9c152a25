"""app/conversation/pdf_reader.py: crafted PDF bombs cost a bounded time and memory, in a child process.

The bombs are real files (tests/support/sample_files.py): a small file with thousands of
pages, and one whose compressed page content unpacks to tens of MB of operators.
The chat in a real browser meets one in tests/browser/test_web_security_browser.py.
"""

from __future__ import annotations

import resource
import time

import pytest

from app.conversation.attachments import Refused, read_attachment
from app.conversation.pdf_reader import PdfLimits, Unreadable, page_texts
from app.texts import refusal
from tests.support import sample_files as files

MB = 2**20
LIMITS = PdfLimits(max_pages=300, memory_mb=512, timeout_s=20, max_text_chars=10 * MB)


def reason(data: bytes, limits: PdfLimits) -> Unreadable:
    with pytest.raises(Unreadable) as info:
        page_texts(data, limits)
    return info.value


def test_a_pdf_within_the_limits_gives_each_pages_text():
    assert page_texts(files.pdf_of_pages(3), LIMITS) == [files.PDF_TEXT] * 3


def test_more_pages_than_the_cap_are_refused_before_any_is_read():
    bomb = files.pdf_of_pages(5000)
    assert len(bomb) < MB
    problem = reason(bomb, LIMITS)
    assert (problem.reason, problem.values) == ("pdf_too_many_pages", {"pages": 5000, "limit": 300})


def test_a_stream_that_unpacks_past_the_memory_limit_is_stopped_in_the_child():
    bomb = files.inflating_pdf()  # 70 MB of operators in ~100 KB
    assert len(bomb) < MB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    problem = reason(bomb, PdfLimits(max_pages=300, memory_mb=128, timeout_s=60, max_text_chars=10 * MB))
    assert (problem.reason, problem.values) == ("pdf_too_much_memory", {"limit_mb": 128})
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 20, f"the caller grew by {grown_mb:.0f} MB: the PDF was read in it"


def test_a_pdf_slower_than_the_time_limit_is_stopped_at_the_limit():
    bomb = files.inflating_pdf(unpacked_mb=5)  # ~20 s of pypdf on this machine
    started = time.monotonic()
    problem = reason(bomb, PdfLimits(max_pages=300, memory_mb=1024, timeout_s=2, max_text_chars=10 * MB))
    took = time.monotonic() - started
    assert (problem.reason, problem.values) == ("pdf_too_slow", {"seconds": "2"})
    assert took < 5, f"stopped after {took:.1f} s, the limit is 2 s"


def test_more_text_than_a_message_can_take_is_refused():
    problem = reason(files.pdf_of_pages(20), PdfLimits(300, 512, 20, max_text_chars=500))
    assert problem.reason == "pdf_too_much_text"


def test_the_refusal_names_the_file_and_the_limit():
    with pytest.raises(Refused) as info:
        read_attachment("atlas.pdf", "application/pdf", files.pdf_of_pages(400), 10 * MB, LIMITS)
    for lang, words in (("en", "has 400 pages; a PDF may have at most 300"), ("zh", "有 400 页")):
        message = refusal(lang, [info.value])
        assert "atlas.pdf" in message and words in message, message

"""app/conversation/math_text.py: math kept for the chat's KaTeX rendering, currency dollars shown as
dollars, code untouched, and the rewrite safe to apply again."""

from __future__ import annotations

import asyncio
import random

import pytest

from app.conversation.math_text import DisplayStream, display_text, frame


@pytest.mark.parametrize("raw, shown", [
    # Currency: never math.
    ("$5 and $10", r"\$5 and \$10"),
    ("it costs $3.50.", r"it costs \$3.50."),
    ("between $5-$10", r"between \$5-\$10"),
    ("$1,200 a month", r"\$1,200 a month"),
    ("$5 to $10 and $x$", r"\$5 to \$10 and $x$"),
    ("a lone $ sign", r"a lone \$ sign"),
    ("ends with $", r"ends with \$"),
    ("US$ 5", r"US\$ 5"),
    # Inline math by Pandoc's rule.
    ("so $x^2$ grows", "so $x^2$ grows"),
    ("$2x+1$ is odd", "$2x+1$ is odd"),
    ("$a$ and $b$", "$a$ and $b$"),
    ("$ x $ is not math", r"\$ x \$ is not math"),
    ("$x$5", r"\$x\$5"),
    # No math across paragraphs.
    ("$x\n\ny$", "\\$x\n\ny\\$"),
    # Display math.
    ("$$\n\\int_0^1 x\\,dx\n$$", "$$\n\\int_0^1 x\\,dx\n$$"),
    ("$$E=mc^2$$ and $5", r"$$E=mc^2$$ and \$5"),
    # The delimiters models write.
    (r"area \(\pi r^2\) here", r"area $\pi r^2$ here"),
    (r"\( x \)", "$x$"),
    ("see \\[a^2+b^2=c^2\\] done", "see \n$$\na^2+b^2=c^2\n$$\n done"),
    (r"an unclosed \( stays", r"an unclosed \( stays"),
    # Escapes stay escapes.
    (r"already \$5", r"already \$5"),
    # Code stays literal.
    ("`$x$` and $5", r"`$x$` and \$5"),
    ("``a ` $b$`` $c$", "``a ` $b$`` $c$"),
    ("```python\nprice = '$5'\nm = '$x$'\n```\n$5", "```python\nprice = '$5'\nm = '$x$'\n```\n\\$5"),
    ("~~~\n$5\n~~~", "~~~\n$5\n~~~"),
    ("```\n$5 still streaming", "```\n$5 still streaming"),
    ("a ` lone backtick $5", r"a ` lone backtick \$5"),
    ("", ""),
    ("no dollars at all", "no dollars at all"),
])
def test_display_text(raw: str, shown: str) -> None:
    assert display_text(raw) == shown


@pytest.mark.parametrize("raw", [
    "$5 and $10", r"\(x\) and \[y\]", "$$a$$ `$b$` $c$ $3.50", "```\n$x$\n```\n$x$ $5",
])
def test_rewriting_twice_changes_nothing(raw: str) -> None:
    once = display_text(raw)
    assert display_text(once) == once


def test_a_growing_text_is_appended_and_a_changed_one_replaced() -> None:
    assert frame("\\$5", "$5 and") == (" and", False)
    # "$x" alone is a lone dollar; its closing "$" makes it math: the shown text changes.
    assert frame("\\$x", "$x$") == ("$x$", True)


def test_a_stream_in_any_pieces_shows_the_whole_text_rewritten() -> None:
    raw = r"Price $5, area \(\pi r^2\), `$x$` and $$x^2$$; $y$ then $3.50."
    for size in (1, 2, 3, 7, len(raw)):
        browser = [""]

        async def send(text: str, whole: bool) -> None:
            browser[0] = text if whole else browser[0] + text

        stream = DisplayStream(send)
        for k in range(0, len(raw), size):
            asyncio.run(stream(raw[k:k + size]))
            assert browser[0] == stream.shown == display_text(raw[:k + size])
        assert stream.raw == raw


def test_a_reply_carried_on_starts_from_its_shown_text() -> None:
    sent: list[tuple[str, bool]] = []

    async def send(text: str, whole: bool) -> None:
        sent.append((text, whole))

    stream = DisplayStream(send, display_text("$5 and "))
    asyncio.run(stream("$10"))
    assert sent == [("\\$10", False)]


def test_plain_frames_then_marks_in_random_pieces_show_the_rewrite_of_the_whole() -> None:
    """A reply sent as it is while it holds no mark, then rewritten once one comes, shows the
    same as the rewrite of the whole text at every frame (seeded random texts and cuts)."""
    rng = random.Random(7)
    alphabet = ["a", " ", "5", "x", "\n", "$", "\\", "(", ")", "[", "]", "`", "~", ".", "é"]
    for _ in range(300):
        plain = "".join(rng.choice("ab c.\n") for _ in range(rng.randint(0, 30)))
        raw = plain + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        browser = [""]

        async def send(text: str, whole: bool) -> None:
            browser[0] = text if whole else browser[0] + text

        stream, k = DisplayStream(send), 0
        while k < len(raw):
            size = rng.randint(1, 6)
            asyncio.run(stream(raw[k:k + size]))
            k += size
            assert browser[0] == stream.shown == display_text(raw[:k]), raw[:k]

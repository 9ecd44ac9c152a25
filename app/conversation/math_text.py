"""A reply's text made safe for the chat's math rendering (Chainlit's ``latex``: remark-math).

remark-math reads every single ``$`` as a math delimiter, so "$5 and $10" would render
"5 and " as a formula. The model's text is rewritten before it is shown (the history,
the export and the continuation keep the model's own text):

- a ``$`` counts as math only by Pandoc's rule: an opening ``$`` has a non-space right
  after it, its closing ``$`` (in the same paragraph) a non-space right before it and no
  digit right after it; and a ``$`` that starts an amount ("$5", "$3.50", "$1,200")
  opens nothing. Every other ``$`` is escaped (``\\$``), which Markdown shows as ``$``;
- ``$$`` stays display math;
- ``\\(...\\)`` and ``\\[...\\]``, the delimiters many models (ERNIE among them) write,
  become ``$...$`` and a ``$$`` block, which remark-math knows;
- code (fenced blocks, inline code spans) is left exactly as it is.

The rewrite is idempotent (an escaped ``\\$`` stays one), so a text that was shown once
(a reply saved while it streamed) can be rewritten again.
"""

from __future__ import annotations

import re
from typing import Awaitable, Callable

# A fence opens a code block: up to three spaces, then three or more ` or ~.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_BACKTICKS = re.compile(r"`+")
# An amount: digits (with thousands commas and decimals), then no letter: "$2x$" is math.
_AMOUNT = re.compile(r"\$\d[\d,]*(?:\.\d+)?(?![\w^_{}\\])")
_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")
# The only characters the rewrite of prose looks at.
_SPECIAL = re.compile(r"[\\$]")
# With none of these a text is shown as it is: no math, no escape, no code.
_ANY_MARK = re.compile(r"[\\$`~]")


def display_text(text: str) -> str:
    """``text`` with its math kept, its other dollars escaped and its code untouched."""
    out: list[str] = []
    for code, part in _code_split(text):
        out.append(part if code else _prose(part))
    return "".join(out)


def frame(shown: str, raw: str) -> tuple[str, bool]:
    """What to send to a browser that shows ``shown`` so it shows ``display_text(raw)``.

    Mostly the rewritten text only grows: (the new end, False), appended by the browser.
    When an earlier part changes (a ``$`` shown escaped until its closing ``$`` came, a
    ``\\(`` until its ``\\)``), (the whole text, True): the browser replaces it.
    """
    now = display_text(raw)
    if now.startswith(shown):
        return now[len(shown):], False
    return now, True


class DisplayStream:
    """The token batcher's output rewritten for display: keeps the raw text and what is shown.

    ``send(text, whole)`` appends ``text``, or replaces the shown text when ``whole``.
    """

    def __init__(self, send: Callable[[str, bool], Awaitable[None]], shown: str = "") -> None:
        # A reply carried on starts from its saved, already rewritten text (idempotent).
        self._send, self.raw, self.shown = send, shown, display_text(shown)
        # Until the reply holds a mark, its rewrite is itself: each frame's text goes as it is,
        # instead of rewriting the whole reply again (most replies are plain prose).
        self._plain = _ANY_MARK.search(shown) is None

    async def __call__(self, chunk: str) -> None:
        self.raw += chunk
        if self._plain and _ANY_MARK.search(chunk) is None:
            text, whole = chunk, False
        else:
            self._plain = False
            text, whole = frame(self.shown, self.raw)
        self.shown = text if whole else self.shown + text
        if text:
            await self._send(text, whole)


def _code_split(text: str) -> list[tuple[bool, str]]:
    """The text cut into (is_code, piece) pieces: fenced blocks, then inline code spans."""
    pieces: list[tuple[bool, str]] = []
    pos = 0
    while (fence := _FENCE.search(text, pos)) is not None:
        pieces.extend(_inline_split(text[pos:fence.start()]))
        mark = fence.group(1)
        closing = re.compile(r"^ {0,3}" + re.escape(mark[0]) + "{" + str(len(mark)) + r",}[ \t]*$",
                             re.MULTILINE)
        line_end = text.find("\n", fence.end())
        close = closing.search(text, line_end) if line_end != -1 else None
        # An unclosed fence runs to the end (CommonMark), as it does while a reply streams.
        end = len(text) if close is None else close.end()
        pieces.append((True, text[fence.start():end]))
        pos = end
    pieces.extend(_inline_split(text[pos:]))
    return pieces


def _inline_split(text: str) -> list[tuple[bool, str]]:
    """Inline code spans: a run of n backticks up to the next run of exactly n."""
    pieces: list[tuple[bool, str]] = []
    pos = start = 0
    while (run := _BACKTICKS.search(text, pos)) is not None:
        closing = next((m for m in _BACKTICKS.finditer(text, run.end())
                        if len(m.group()) == len(run.group())), None)
        if closing is None:  # no closing run: the backticks are literal text
            pos = run.end()
            continue
        pieces.append((False, text[start:run.start()]))
        pieces.append((True, text[run.start():closing.end()]))
        pos = start = closing.end()
    pieces.append((False, text[start:]))
    return [piece for piece in pieces if piece[1]]


def _prose(text: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "([":
                close = text.find("\\" + (")" if nxt == "(" else "]"), i + 2)
                if close != -1:
                    inner = text[i + 2:close].strip()
                    out.append(f"${inner}$" if nxt == "(" else f"\n$$\n{inner}\n$$\n")
                    i = close + 2
                    continue
            out.append(text[i:i + 2])  # an escape (\$ among them) stays as it is
            i += 2
            continue
        if c != "$":
            # Everything up to the next \ or $ is shown as it is: taken in one step, as this
            # runs over the whole reply at every frame (a character at a time it was a third
            # of a streaming worker's CPU on 1,024-token replies: docs/performance.md).
            special = _SPECIAL.search(text, i + 1)
            end = n if special is None else special.start()
            out.append(text[i:end])
            i = end
            continue
        if text.startswith("$$", i):
            close = text.find("$$", i + 2)
            end = n if close == -1 else close + 2
            out.append(text[i:end])
            i = end
            continue
        close = _inline_close(text, i)
        if close is None:
            out.append("\\$")
            i += 1
        else:
            out.append(text[i:close + 1])
            i = close + 1
    return "".join(out)


def _inline_close(text: str, start: int) -> int | None:
    """Where the ``$`` at ``start`` closes as inline math (Pandoc's rule), or None."""
    after = start + 1
    if after >= len(text) or text[after].isspace() or _AMOUNT.match(text, start):
        return None
    paragraph = _PARAGRAPH_END.search(text, after)
    limit = len(text) if paragraph is None else paragraph.start()
    j = after
    while (j := text.find("$", j, limit)) != -1:
        if text[j - 1] == "\\":
            j += 1
            continue
        if not text[j - 1].isspace() and not (j + 1 < len(text) and text[j + 1].isdigit()):
            return j
        j += 1
    return None

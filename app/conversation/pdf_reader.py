"""A PDF's text, read by pypdf in a child process that a PDF bomb cannot take the chat down with.

pypdf is pure Python: a small file can hold a page tree of thousands of pages or a
compressed stream that inflates to gigabytes, and parsing it in the chat worker
would hold a thread for minutes and its memory until the kernel kills the worker
(with every chat on it).  Here each PDF is read by ``python -m app.conversation.pdf_reader`` with
an address-space limit (RLIMIT_AS: a bigger allocation fails in the child, not in
the worker), a wall-clock limit (the child is killed when it passes) and a page
cap (checked before any page is read).  A PDF past a limit raises
:class:`Unreadable` with the reason, a key of app/texts/.

The child gets the file on stdin and writes one JSON object on stdout: the pages'
texts, or the reason it stopped.  The chat reads files on a few threads of its own
(app/conversation/file_readers.py), so a crowd sending PDFs at once costs a bounded multiple
of the memory limit.
"""

from __future__ import annotations

import io
import json
import math
import resource
import subprocess
import sys
from dataclasses import dataclass, field

from server.paths import ROOT


@dataclass(frozen=True)
class PdfLimits:
    max_pages: int
    memory_mb: int
    timeout_s: float
    max_text_chars: int  # more text than this could never fit a prompt


@dataclass
class Unreadable(Exception):
    reason: str
    values: dict = field(default_factory=dict)


def page_texts(data: bytes, limits: PdfLimits) -> list[str]:
    """Each page's text; raises :class:`Unreadable` when the PDF is damaged or past a limit."""
    command = [sys.executable, "-m", "app.conversation.pdf_reader", str(limits.max_pages),
               str(limits.memory_mb), str(limits.timeout_s), str(limits.max_text_chars)]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=limits.timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:  # run() has killed the child
        raise Unreadable("pdf_too_slow", {"seconds": f"{limits.timeout_s:g}"}) from None
    try:
        result = json.loads(done.stdout)
    except ValueError:
        # No answer: the child died, most likely of an allocation that failed inside C code.
        raise Unreadable("pdf_too_much_memory", {"limit_mb": limits.memory_mb}) from None
    if "refused" in result:
        raise Unreadable(result["refused"], result["values"])
    return result["pages"]


def read_pages(data: bytes, limits: PdfLimits) -> dict:
    """In the child: the result to print, within the page and text caps."""
    import pypdf  # only the child needs it
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
        if (count := len(reader.pages)) > limits.max_pages:
            return {"refused": "pdf_too_many_pages", "values": {"pages": count, "limit": limits.max_pages}}
        pages, chars = [], 0
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            chars += len(pages[-1])
            if chars > limits.max_text_chars:
                return {"refused": "pdf_too_much_text",
                        "values": {"limit_mb": f"{limits.max_text_chars / 2**20:.0f}"}}
        return {"pages": pages}
    except MemoryError:
        return {"refused": "pdf_too_much_memory", "values": {"limit_mb": limits.memory_mb}}
    except Exception as exc:  # pypdf raises many kinds for damaged or locked files
        return {"refused": "pdf_unreadable", "values": {"detail": str(exc)[:120] or type(exc).__name__}}


def child_main(args: list[str]) -> None:
    limits = PdfLimits(int(args[0]), int(args[1]), float(args[2]), int(args[3]))
    memory = limits.memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # The parent kills the child at its time limit; this also ends it if the parent is gone.
    cpu_s = math.ceil(limits.timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    result = read_pages(sys.stdin.buffer.read(), limits)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    child_main(sys.argv[1:])

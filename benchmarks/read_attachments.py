"""How long the chat takes to read an attached file near the 10 MB upload limit.

    .venv/bin/python benchmarks/read_attachments.py

The chat reads files in a worker thread (app/chat.py), so this is the wait before
the reply starts, not a stall of other chats.  The files are built as in the tests
(tests/support/sample_files.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.conversation.attachments import read_attachment  # noqa: E402
from tests.support import sample_files as files  # noqa: E402

MB = 2**20
LIMIT = 10 * MB
SIZE = int(9.9 * MB)
CASES = {
    "UTF-8 text": ("a.txt", ("weather report " * 700_000).encode()[:SIZE]),
    "Windows-1252 text": ("b.txt", (files.CP1252_TEXT * 200_000).encode("cp1252")[:SIZE]),
    "GBK text": ("c.txt", (files.GBK_TEXT * 150_000).encode("gbk")[:SIZE]),
    "PDF, one page": ("d.pdf", files.pdf_with_text()),
}

for label, (name, data) in CASES.items():
    started = time.perf_counter()
    attachment = read_attachment(name, "", data, LIMIT)
    print(f"{label:18} {len(data) / MB:5.1f} MiB  read as {attachment.encoding:8} "
          f"{time.perf_counter() - started:6.2f} s")

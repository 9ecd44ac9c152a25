"""Files attached to a message: their text goes into the prompt, or a clear refusal.

The model reads text only, so a file is accepted when it is text (UTF-8, or one of
the two legacy encodings our users most often have: GBK/GB18030 and Windows-1252,
named in the chat when assumed) or a PDF with a text layer (read by pypdf in a
child process with limits: app/conversation/pdf_reader.py).  Everything else is refused with the
file's name and the reason: an image, binary data, an empty file, a file over the
upload limit, a scanned PDF, a PDF past the reader's limits.  Nothing here knows
about Chainlit; the chat passes (name, MIME type, path) of each uploaded file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import filetype
from charset_normalizer import from_bytes

from app.conversation.pdf_reader import PdfLimits, Unreadable, page_texts

# Byte-order marks name their encoding; "utf-8-sig" drops the mark.
BOMS = [(b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
        (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")]
# Without a mark, only these are tried after UTF-8: with more candidates the detector
# mistakes Windows-1252 for cp1257 or cp1250, and short GBK text for Big5 (docs/notes.md).
LEGACY_ENCODINGS = ["gb18030", "cp1252"]
# Text has almost no control characters (Unicode's Cc) besides tab, newlines and form feed.
MAX_CONTROL_SHARE = 0.01
CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Attachment:
    name: str
    text: str
    encoding: str  # "utf-8", "gb18030", "cp1252", ... or "pdf"

    @property
    def decoded_from_legacy(self) -> bool:
        return self.encoding not in ("utf-8", "pdf")


@dataclass
class Refused(Exception):
    """A file that cannot go into the prompt: ``reason`` is a key of app/texts/."""

    name: str
    reason: str
    values: dict = field(default_factory=dict)


def read_attachment(name: str, mime: str, data: bytes, max_bytes: int, pdf: PdfLimits) -> Attachment:
    """The text of one uploaded file; raises :class:`Refused` with the reason."""
    check_size(name, len(data), max_bytes)
    if not data.strip():
        raise Refused(name, "file_empty")
    sniffed = filetype.guess_mime(data) or ""
    if mime.startswith("image/") or sniffed.startswith("image/"):
        raise Refused(name, "file_image")
    if sniffed == "application/pdf" or mime == "application/pdf" or name.lower().endswith(".pdf"):
        return Attachment(name, pdf_text(name, data, pdf), "pdf")
    text, encoding = decode(name, data, known_binary=bool(sniffed))
    return Attachment(name, text, encoding)


def check_size(name: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise Refused(name, "file_too_big", {"size_mb": f"{size / 2**20:.1f}",
                                             "limit_mb": f"{max_bytes / 2**20:.0f}"})


def decode(name: str, data: bytes, known_binary: bool) -> tuple[str, str]:
    """(text, encoding). Valid UTF-8 text wins over a magic number that happens to match
    ("ID3 tags ..." starts like an MP3); a known binary format is never guessed as legacy text."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return checked_text(name, data.decode(encoding, errors="replace")), encoding.split("-sig")[0]
    try:
        return checked_text(name, data.decode("utf-8")), "utf-8"
    except UnicodeDecodeError:
        pass
    if known_binary or b"\x00" in data:
        raise Refused(name, "file_binary")
    best = from_bytes(data, cp_isolation=LEGACY_ENCODINGS).best()
    if best is None:
        raise Refused(name, "file_encoding")
    return checked_text(name, str(best)), best.encoding


def checked_text(name: str, text: str) -> str:
    if len(CONTROLS.findall(text)) > MAX_CONTROL_SHARE * len(text):
        raise Refused(name, "file_binary")
    return text


def pdf_text(name: str, data: bytes, limits: PdfLimits) -> str:
    try:
        pages = page_texts(data, limits)
    except Unreadable as problem:
        raise Refused(name, problem.reason, problem.values) from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise Refused(name, "pdf_no_text", {"pages": len(pages)})
    return text


def read_files(files: list[tuple[str, str, Path]], max_bytes: int, max_files: int, pdf: PdfLimits,
               known: Optional[Mapping[Path, Attachment]] = None) -> tuple[dict[Path, Attachment], list[Refused]]:
    """Read every (name, MIME type, path), each path once however often the message names it;
    a path in ``known`` was read before and is not read again.  The refusals name each bad file."""
    distinct = {path: (name, mime) for name, mime, path in files}
    if len(distinct) > max_files:
        return {}, [Refused(", ".join(name for name, _ in distinct.values()), "too_many_files",
                            {"limit": max_files})]
    known = known or {}
    read, refused = {}, []
    for path, (name, mime) in distinct.items():
        try:
            read[path] = known.get(path) or read_path(name, mime, path, max_bytes, pdf)
        except Refused as problem:
            refused.append(problem)
    return read, refused


def read_path(name: str, mime: str, path: Path, max_bytes: int, pdf: PdfLimits) -> Attachment:
    try:
        check_size(name, path.stat().st_size, max_bytes)  # before reading a huge file
        return read_attachment(name, mime, path.read_bytes(), max_bytes, pdf)
    except FileNotFoundError:  # read and deleted already, for a message that named it before
        raise Refused(name, "file_gone") from None


def prompt_with(typed: str, attachments: list[Attachment]) -> str:
    """The user message as the model gets it: the typed text, then each file's text."""
    parts = [typed.strip()] if typed.strip() else []
    for a in attachments:
        parts.append(f"--- {a.name} ---\n{a.text.strip()}\n--- end of {a.name} ---")
    return "\n\n".join(parts)

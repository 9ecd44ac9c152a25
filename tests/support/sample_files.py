"""Real files of the kinds people attach, built here byte by byte (no fixtures to ship).

PDFs are written as the format specifies (objects, a cross-reference table with
exact offsets), so pypdf reads them without repairing anything; a "scan" is a
page whose only content is a picture.
"""

from __future__ import annotations

import struct
import zlib

PDF_TEXT = "The quarterly report says revenue grew 12 percent."
HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def pdf(page_resources: str, content: bytes, extra_objects: list[bytes] = (),
        stream_filter: str = "") -> bytes:
    return assemble([b"<< /Type /Catalog /Pages 2 0 R >>",
                     b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                     b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                     + f"/Resources {page_resources} >>".encode(),
                     stream(content, stream_filter), *extra_objects])


def stream(content: bytes, stream_filter: str = "") -> bytes:
    return (f"<< /Length {len(content)} {stream_filter} >>\nstream\n".encode() + content
            + b"\nendstream")


def assemble(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the catalog first), with its exact xref table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def pdf_with_text(line: str = PDF_TEXT) -> bytes:
    return pdf("<< /Font << /F1 5 0 R >> >>", b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % line.encode(), [HELVETICA])


def scanned_pdf() -> bytes:
    """One page that shows an 8x8 grey picture and has no text layer, like a scan."""
    pixels = bytes(range(0, 256, 4))
    image = (b"<< /Type /XObject /Subtype /Image /Width 8 /Height 8 /ColorSpace /DeviceGray "
             b"/BitsPerComponent 8 /Length %d >>\nstream\n" % len(pixels) + pixels + b"\nendstream")
    return pdf("<< /XObject << /Im1 5 0 R >> >>", b"q 400 0 0 400 100 300 cm /Im1 Do Q", [image])


def pdf_of_pages(count: int) -> bytes:
    """A small file with ``count`` pages (objects 5 on), all showing one shared line of text."""
    kids = " ".join(f"{5 + i} 0 R" for i in range(count))
    page = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
            b"/Resources << /Font << /F1 4 0 R >> >> >>")
    return assemble([b"<< /Type /Catalog /Pages 2 0 R >>",
                     f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
                     stream(b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % PDF_TEXT.encode()),
                     HELVETICA, *[page] * count])


def inflating_pdf(unpacked_mb: int = 70) -> bytes:
    """A PDF bomb: one page whose compressed text (well under 1 MB) unpacks to ``unpacked_mb`` MB
    of text operators, under pypdf's own 75 MB limit per stream; pypdf needs about 4 s and 50 MB
    of memory per unpacked MB to extract it (minutes and gigabytes for 70)."""
    operators = b"BT /F1 12 Tf 72 720 Td\n" + b"(x) Tj\n" * (unpacked_mb * 2**20 // 7) + b"ET"
    return pdf("<< /Font << /F1 5 0 R >> >>", zlib.compress(operators, 9), [HELVETICA],
               stream_filter="/Filter /FlateDecode")


def png(width: int = 4, height: int = 4) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes([200, 30, 30] * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def gzip_bytes() -> bytes:
    """A binary file of a known format (filetype recognises gzip); the same bytes on every call
    (no time stamp in the header), so the tests' ids are too, as pytest-xdist's workers need."""
    import gzip
    return gzip.compress(b"not text " * 100, mtime=0)


CP1252_TEXT = "Café crème brûlée — naïve façade, “quoted”. Größe: 3,50 €.\n"
GBK_TEXT = "今天天气很好，我们去公园散步吧。这是一个用 GBK 编码保存的文本文件。\n"

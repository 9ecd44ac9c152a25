"""A shared chat's link as a QR code, drawn here (segno, pure Python): PNG for the chat's image,
SVG for the pages.  Black on white with the standard quiet zone, whatever the page's colours:
phone cameras read that best off a projector."""

from __future__ import annotations

import io

import segno

SCALE = 8  # pixels per module of the PNG; the SVG scales to its box


def _drawn(link: str, kind: str) -> bytes:
    out = io.BytesIO()
    # Level M survives a washed-out beam or a glare spot; a link needs no more.
    segno.make(link, error="m").save(out, kind=kind, scale=SCALE, border=4, dark="#000", light="#fff",
                                     **({"xmldecl": False} if kind == "svg" else {}))
    return out.getvalue()


def png(link: str) -> bytes:
    return _drawn(link, "png")


def svg(link: str) -> bytes:
    return _drawn(link, "svg")

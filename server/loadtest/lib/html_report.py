"""``report.html``: one self-contained page per run that a tester can hand on (standard library
only, so a GPU machine without our app environment writes it too).

Every tool builds its page from the JSON it has already written (so a saved result can be
drawn again) with :class:`Report`: the verdict first, then the run's facts, tables and
plots. Nothing is fetched from elsewhere: the CSS is inline and the plots are embedded as
``data:`` URIs. Every value is escaped, since results hold text from outside (a model
name, an error message from a server).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Iterable, Optional, Sequence

FILE_NAME = "report.html"

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
padding:0 1em;color:#1a1a1a;line-height:1.45}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{font-size:1.2em;padding:.8em 1em;border-radius:6px;margin:1em 0;border:2px solid #888;background:#f4f4f4}
.verdict.ok{border-color:#2a7d2a;background:#eaf6ea} .verdict.bad{border-color:#b02a2a;background:#fbeaea}
.sub{color:#555} table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right} th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left} dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}
dt{font-weight:600} dd{margin:0} img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}
.warn{color:#8a4b00} .wide{overflow-x:auto}
"""


def esc(value: object) -> str:
    """Text for HTML: escaped, quotes included; None as a dash."""
    return "-" if value is None else html.escape(str(value), quote=True)


def number(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


class Report:
    """A page: its verdict (``ok``: True green, False red, None plain) first, then sections."""

    def __init__(self, title: str, verdict: str, ok: Optional[bool] = None, subtitle: str = ""):
        self.title, self.verdict, self.ok, self.subtitle = title, verdict, ok, subtitle
        self.parts: list[str] = []

    def facts(self, heading: str, pairs: Iterable[tuple[str, object]]) -> "Report":
        rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
        self.parts.append(f"<h2>{esc(heading)}</h2><dl>{rows}</dl>")
        return self

    def table(self, heading: str, headers: Sequence[str], rows: Iterable[Sequence[object]],
              note: str = "") -> "Report":
        head = "".join(f"<th>{esc(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
        after = f'<p class="sub">{esc(note)}</p>' if note else ""
        self.parts.append(f'<h2>{esc(heading)}</h2><div class="wide"><table><tr>{head}</tr>{body}'
                          f"</table></div>{after}")
        return self

    def text(self, heading: str, lines: Iterable[str], warn: bool = False) -> "Report":
        lines = list(lines)
        if lines:
            cls = ' class="warn"' if warn else ""
            self.parts.append(f"<h2>{esc(heading)}</h2>"
                              + "".join(f"<p{cls}>{esc(line)}</p>" for line in lines))
        return self

    def pre(self, heading: str, text: str) -> "Report":
        self.parts.append(f"<h2>{esc(heading)}</h2><pre>{esc(text)}</pre>")
        return self

    def images(self, heading: str, paths: Iterable[Path]) -> "Report":
        """PNG files embedded as data: URIs; ones missing are left out."""
        tags = [f'<img alt="{esc(p.name)}" src="data:image/png;base64,'
                f'{base64.b64encode(p.read_bytes()).decode("ascii")}">'
                for p in paths if p.is_file()]
        if tags:
            self.parts.append(f"<h2>{esc(heading)}</h2>" + "".join(tags))
        return self

    def html(self) -> str:
        cls = {True: " ok", False: " bad", None: ""}[self.ok]
        sub = f'<p class="sub">{esc(self.subtitle)}</p>' if self.subtitle else ""
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body>"
                f"<h1>{esc(self.title)}</h1>{sub}"
                f'<div class="verdict{cls}" id="verdict">{esc(self.verdict)}</div>'
                + "".join(self.parts) + "</body></html>\n")

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / FILE_NAME
        path.write_text(self.html(), encoding="utf-8")
        return path

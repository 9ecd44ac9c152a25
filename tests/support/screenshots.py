"""Where the browser tests' screenshots go: the test's own folder, or, with UPDATE_SCREENSHOT=1,
docs/, where the README and the reference pages show them.  Re-shoot with fonts for Chinese and
emoji in the browser (Debian: fonts-noto-cjk fonts-noto-color-emoji), or those show as boxes:

    UPDATE_SCREENSHOT=1 ./scripts/test -k "readme or live_view or formulas or sign_in_page or admin_sees or shared_chat or on_a_phone"
"""

from __future__ import annotations

import os
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def screenshot_path(name: str, tmp_path: Path) -> Path:
    return DOCS / name if os.environ.get("UPDATE_SCREENSHOT") else tmp_path / name

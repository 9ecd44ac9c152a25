"""Accessibility checks in Chromium: npm's axe-core (tests/axe/, installed by ./scripts/test
under .cache/axe) put into a page, and what a phone-sized page in either theme looks like.

axe is evaluated through Playwright (the DevTools protocol), which no Content-Security-Policy
of a page stops: the shared page allows no script but its own, and gets checked the same way.
"""

from __future__ import annotations

import json
from functools import cache
import pytest

from app.pages.share_page import THEME_KEY
from server.paths import ROOT

AXE = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
THEMES = ("light", "dark")
SERIOUS = ("serious", "critical")
# Findings in Chainlit's own page that nothing from outside its bundle mends: rule -> the
# elements where that rule is not checked. The "..." menu of each saved chat in the sidebar
# (#thread-options) is a div inside the chat's own button, with its menu trigger's
# aria-haspopup and aria-expanded, which a div may not carry; made a button it is a control in
# a control (nested-interactive), and React puts the attributes back at every open and close.
CHAINLIT = {"aria-allowed-attr": "#thread-options"}


@cache
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"axe-core is missing at {AXE.relative_to(ROOT)}: ./scripts/test installs it "
                    "(npm ci of tests/axe/)")
    return AXE.read_text(encoding="utf-8")


def phone(browser, theme: str):
    """A new browser context the size of a phone for a test of ``theme``; the system's own
    preference is the other theme, so that a page that followed it instead would show."""
    return browser.new_context(locale="en-US", viewport=PHONE, is_mobile=True, has_touch=True,
                               device_scale_factor=2, color_scheme="dark" if theme == "light" else "light")


def choose_theme(page, theme: str) -> None:
    """Pick ``theme`` in the chat's header menu, as a person does (Chainlit stores it under
    ``THEME_KEY`` in localStorage); wait until the page shows it."""
    page.locator("#theme-toggle").click()
    page.get_by_role("menuitem", name=f"{theme.title()} Theme").click()
    page.wait_for_function(f"document.documentElement.classList.contains({json.dumps(theme)})")
    # While its menu is open, the page behind it is hidden from screen readers (aria-hidden).
    page.wait_for_function("!document.querySelector('[data-aria-hidden]')")
    assert page.evaluate(f"localStorage.getItem({json.dumps(THEME_KEY)})") == theme


def violations(page) -> list[str]:
    """The serious and critical axe violations on the page as it is now, one line each: the
    rule, its impact, the element, axe's help and the element's HTML; less ``CHAINLIT``'s."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source())
    return page.evaluate("""async ([serious, skip]) => {
        const result = await window.axe.run(document, {resultTypes: ['violations'], elementRef: true});
        const skipped = (rule, node) => rule in skip && node.element?.matches(skip[rule]);
        return result.violations.flatMap(v => v.nodes
            .filter(n => serious.includes(n.impact || v.impact) && !skipped(v.id, n))
            .map(n => `${v.id} (${n.impact || v.impact}): ${n.target.join(' ')}: ${v.help}: ` +
                      n.html.slice(0, 200)));
    }""", [list(SERIOUS), CHAINLIT])


def overflow(page) -> int:
    """How many CSS pixels the page is wider than the screen (0: no sideways scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def background(page) -> tuple[int, int, int]:
    """The page's own background colour (its body's, else the root's), as red, green, blue."""
    rgb = page.evaluate("""() => {
        for (const e of [document.body, document.documentElement]) {
            const c = getComputedStyle(e).backgroundColor;
            if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c;
        }
        return 'rgb(255, 255, 255)';
    }""")
    return tuple(int(n) for n in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])


def is_dark(rgb: tuple[int, int, int]) -> bool:
    return sum(rgb) / 3 < 100

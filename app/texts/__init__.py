"""Everything the chat says to the user, in English and Simplified Chinese.

The words are in one module per language (``en``, ``zh``: the same keys, the same
placeholders); here they are looked up (``text``) and put together.  The language
follows the browser (Chainlit passes its Accept-Language); any ``zh*`` language gets
Chinese, everything else English.
"""

from __future__ import annotations

import math

from app.texts import en, zh

TEXTS: dict[str, dict[str, str]] = {"en": en.TEXTS, "zh": zh.TEXTS}

FIGURES_MARK = "\n\n*⏱ "  # starts the figures line appended to a finished reply


def without_figures(shown: str) -> str:
    """A reply as the model wrote it, from the text the chat shows and saves."""
    return shown.split(FIGURES_MARK)[0]


def lang_of(locale: str | None) -> str:
    return "zh" if (locale or "").lower().startswith("zh") else "en"


def text(lang: str, key: str, **values) -> str:
    return TEXTS[lang][key].format(**values)


def figures_line(lang: str, stats, seed: int | None = None, taken_over: bool = False,
                 model: str | None = None) -> str:
    """The reply's figures; its marks say when it went on after its engine (``stats.continued``)
    or its chat server (``taken_over``: app/conversation/in_flight.py) stopped; ``model`` starts it when
    several models are served (app/engine/model_choice.py)."""
    ttft = f"{stats.ttft_s * 1000:.0f} ms" if stats.ttft_s is not None else "–"
    tps = f"{stats.tokens_per_s:.1f} tok/s" if stats.tokens_per_s else "– tok/s"
    line = text(lang, "figures", ttft=ttft, tps=tps,
                prompt=stats.prompt_tokens if stats.prompt_tokens is not None else "–",
                completion=stats.completion_tokens if stats.completion_tokens is not None else "–")
    if model is not None:
        line = f"{model} · {line}"
    if seed is not None:
        line += f" · {text(lang, 'seed_figure', seed=seed)}"
    if stats.continued:
        line += f" · {text(lang, 'continued')}"
    return f"{line} · {text(lang, 'taken_over')}" if taken_over else line


def refusal(lang: str, refused) -> str:
    """One message for the files that cannot go into the prompt, one line per file."""
    problems = "\n".join(f"- {text(lang, r.reason, name=r.name, **r.values)}" for r in refused)
    return text(lang, "files_refused", problems=problems)


def duration(lang: str, seconds: float | None) -> str:
    """A wait as people say it: seconds, minutes, or hours and minutes, rounded up."""
    if seconds is None:
        return text(lang, "when_unknown")
    whole = max(1, math.ceil(seconds))
    if whole < 90:
        return text(lang, "when_s", n=whole)
    minutes = math.ceil(whole / 60)
    if minutes < 90:
        return text(lang, "when_min", n=minutes)
    return text(lang, "when_h", h=minutes // 60, m=minutes % 60)

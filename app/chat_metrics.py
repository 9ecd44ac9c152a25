"""The chat's own Prometheus metrics, one small function per event the app counts.

Every app worker writes its figures to files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode, chosen when the module is imported); the supervisor's endpoint adds up every
worker's (server/stack/metrics_endpoint.py, docs/monitoring.md). Without that variable (the app
run on its own) the figures stay in this process, and nothing serves them.

Other modules only call these functions: a metric's name, labels and buckets live here.
"""

from __future__ import annotations

from typing import Optional

from prometheus_client import Counter, Gauge, Histogram

PREFIX = "ernie_chat"

# From a fast GPU's tens of milliseconds to a loaded CPU's minute.
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
# One stream's decode speed: a CPU's few tokens/s to a GPU's hundreds.
TOKENS_PER_S_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)

# livesum: the workers alive now, added up; a dead worker's chats are closed with it.
CHATS_OPEN = Gauge(f"{PREFIX}_chats_open", "Chats open now (a page with its socket connected).",
                   multiprocess_mode="livesum")
MESSAGES = Counter(f"{PREFIX}_messages", "Messages users sent (commands and regenerations included).")
REPLIES = Counter(f"{PREFIX}_replies", "Replies that streamed to their end.")
TTFT = Histogram(f"{PREFIX}_time_to_first_token_seconds",
                 "From the user's message reaching the app to the reply's first token, as the user "
                 "waits for it (history fitting, the prompt's count and any retry included).",
                 buckets=TTFT_BUCKETS)
TOKENS_PER_S = Histogram(f"{PREFIX}_reply_tokens_per_second",
                         "A finished reply's decode speed: its tokens after the first over the time after "
                         "the first.", buckets=TOKENS_PER_S_BUCKETS)
ERRORS = Counter(f"{PREFIX}_errors", "Errors the chat showed, by kind (app.engine.engine_client.error_kind "
                 "and the chat's own: too_long, too_long_files, bad_seed, empty, files_refused ...).", ["kind"])
LOGINS_FAILED = Counter(f"{PREFIX}_logins_failed", "Login attempts refused: a wrong name or password "
                        "(password), refused unchecked after too many failures (throttled), or a provider sign-in "
                        "outside the allowed groups or domains (provider_refused).", ["reason"])
LIMITS_HIT = Counter(f"{PREFIX}_limits_hit", "Messages a limit refused: messages, tokens, replies (per user) "
                    "or busy (the engine's queue).", ["limit"])
# Each known label at 0 from the start: Prometheus's increase() takes a series' first sample
# as its start, so a count born at 1 (the first failed login) would show no increase at all.
for _reason in ("password", "throttled", "provider_refused"):
    LOGINS_FAILED.labels(reason=_reason)
for _limit in ("messages", "tokens", "replies", "busy"):
    LIMITS_HIT.labels(limit=_limit)
CONTINUED = Counter(f"{PREFIX}_replies_continued", "Replies that went on on another engine (or the "
                    "restarted one) after theirs stopped under them.")
TAKEN_OVER = Counter(f"{PREFIX}_replies_taken_over", "Replies another app worker was writing, carried "
                     "on by this one after that worker went away.")


def chat_opened() -> None:
    CHATS_OPEN.inc()


def chat_closed() -> None:
    CHATS_OPEN.dec()


def message_received() -> None:
    MESSAGES.inc()


def reply_finished(waited_s: Optional[float], tokens_per_s: Optional[float], continued: bool) -> None:
    """A reply streamed to its end: its user's wait for the first token and its speed (None:
    unknown), and whether it went on on another engine."""
    REPLIES.inc()
    if waited_s is not None:
        TTFT.observe(waited_s)
    if tokens_per_s is not None:
        TOKENS_PER_S.observe(tokens_per_s)
    if continued:
        CONTINUED.inc()


def error_shown(kind: str) -> None:
    ERRORS.labels(kind=kind).inc()


def login_failed(reason: str) -> None:
    LOGINS_FAILED.labels(reason=reason).inc()


def limit_hit(limit: str) -> None:
    """A limit refused a message; ``limit`` names which: messages, tokens, replies (at once), or
    busy (the engine's queue past ERNIE_BUSY_QUEUE)."""
    LIMITS_HIT.labels(limit=limit).inc()


def reply_taken_over() -> None:
    TAKEN_OVER.inc()

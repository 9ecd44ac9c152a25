"""Chainlit 2.12's 1 ms sleep in every Message and Step, taken out (imported by app/chat.py).

``Message.__init__`` and ``Step.__init__`` call ``time.sleep(0.001)`` (chainlit
``message.py`` and ``step.py``), a blocking sleep on the event loop's thread: every
chat of the process stands still for it.  An exchange builds at least three (the user's
message, the ``on_message`` run step, the reply), so a crowd of chats loses 3 ms of the
loop per message; at 300 exchanges a second the loop would do nothing else
(docs/performance.md, "The app's cost per token").  The sleep only spaces out the
``createdAt`` stamps, which ``chainlit.utils.utc_now`` already writes to the
microsecond, and those two modules use ``time`` for nothing else.
"""

from __future__ import annotations

import sys
import types

import chainlit  # noqa: F401  (loads chainlit.message and chainlit.step)


def _no_sleep(seconds: float) -> None:
    return None


# Only those two modules' name `time` is replaced: time.sleep stays what it is everywhere else.
# (By module name: the package's attribute `chainlit.step` is the @step decorator.)
MODULES = ("chainlit.message", "chainlit.step")
NO_SLEEP = types.SimpleNamespace(sleep=_no_sleep)
for name in MODULES:
    sys.modules[name].time = NO_SLEEP

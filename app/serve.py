"""A chat worker's entry point: Chainlit's own CLI, without ``nest_asyncio``.

    python -m app.serve run app/chat.py --headless --host HOST --port PORT

``chainlit run`` calls ``nest_asyncio.apply()`` as its CLI module loads, so that code
may call ``run_until_complete`` inside the running loop. That swaps asyncio's C
``Task`` and ``Future`` for the pure-Python ones and runs the loop's every turn
through nest_asyncio's own Python: a profile of a worker taking a burst spent 17 % of
its CPU in that machinery (docs/notes.md, "The event loop without nest_asyncio").
Without it a message in a burst costs a worker 0.88 of the CPU (5.10 ms against 5.79;
alternating runs, the ranges apart: ``8e59b31:benchmarks/app-cost-cpu/no-nest-asyncio/``).

The app never re-enters the loop. Chainlit does once: ``WebsocketSession.get_config``
asks ``set_chat_profiles`` through ``run_until_complete`` for a profile's
``config_overrides``; without nest_asyncio that call raises, Chainlit catches it and
keeps its global config, which is the right one because the chat's personas
(``app/conversation/personas.py``) override nothing. ``tests/unit/test_chainlit_speed.py`` checks both: that
the loop keeps asyncio's C classes, and that no persona overrides the config.
"""

from __future__ import annotations

import sys
import warnings

import nest_asyncio

# Before chainlit.cli is imported: its import applies nest_asyncio.
nest_asyncio.apply = lambda *args, **kwargs: None
# get_config's refused call leaves its coroutine unawaited (see above): a warning per chat.
warnings.filterwarnings("ignore", message="coroutine 'set_chat_profiles' was never awaited")

from chainlit.cli import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli())

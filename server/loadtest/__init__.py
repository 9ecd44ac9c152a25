"""The load tools, below only the CLI: one package per tool, and the plumbing they share.

* ``lib``: what every tool shares: the load's config and its command-line flags
  (``config``, ``load_args``), the server (``target``), exact-length prompts, the two
  wires (``stream``: the engine's OpenAI stream; ``chat_socket``: the app's websocket,
  ``chat_events``: what its events mean for a chat, ``chat_record``: what a chat saw and
  what became of its message), the statistics (vLLM's definitions), client processes that
  start together, plots, and the machine's CPU by kind of process (``cpu``: ``ernie-chat
  cpu-during``, and around every run of ``qa-load`` and step of ``capacity``).
* ``bench``: ``ernie-chat bench``, the engine's load generator (levels of concurrency,
  its report).
* ``users``: simulated users who arrive and chat over time (``qa-load --users``), and
  ``ernie-chat capacity``, how many of them a machine serves within an objective.
* ``chat``: the load through the chat app: ``ernie-chat qa-load`` (bursts of chats),
  ``bench --app-cost`` and ``--app-overhead`` (what the app costs on bench's load), and a fast
  stand-in upstream that streams as vLLM does, for measuring the app at a GPU's token rate
  (``fast_upstream``).
* ``sweep``: ``ernie-chat tune``, which starts the engine at each point of a sweep with the
  stack's own code and runs bench's load on it.

Imports run down that list's layers (pyproject.toml, "loadtest-layers"): sweep and chat
above bench and users, all above lib; tools of one layer do not import each other.
"""

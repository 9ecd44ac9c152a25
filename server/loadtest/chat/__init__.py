"""The load through the chat app: ``ernie-chat qa-load`` (``qa_load``, ``processes``), and what
the app costs on bench's load (``bench_modes``: ``--app-cost``, ``--app-overhead``)."""

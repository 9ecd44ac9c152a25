"""The load through the chat app: ``ernie-chat qa-load`` (``qa_load``, ``processes``), what
the app costs on bench's load (``bench_modes``: ``--app-cost``, ``--app-overhead``), and the
machine's CPU by kind of process while a load runs (``cpu``: ``ernie-chat cpu-during``)."""

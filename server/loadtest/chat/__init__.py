"""The load through the chat app: ``ernie-chat qa-load`` (``qa_load``, ``processes``), what
the app costs on bench's load (``bench_modes``: ``--app-cost``, ``--app-overhead``), and a fast
stand-in upstream in vLLM's stream format for measuring the app's cost per token
(``fast_upstream``)."""

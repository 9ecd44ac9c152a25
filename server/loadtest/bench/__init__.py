"""``ernie-chat bench``: the engine's load generator (``command``), its levels of
concurrency (``run``, ``workers``, ``processes``) and its report."""

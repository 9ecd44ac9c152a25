"""The load tools: ``bench`` (the engine), ``qa-load`` (the chat app), ``tune`` (settings).

``bench`` is split in the order a request meets it: ``config`` (what is sent),
``target`` (the server), ``prompts``, ``stream`` (one request on the wire),
``run`` (levels of concurrency), ``stats`` (vLLM's definitions), ``report`` and
``plots``.  ``tune`` starts the engine at each point of a sweep with the stack's
own code and benches it; ``qa_load`` drives the app through ``chat_socket``;
``app_overhead`` times the chat's streaming path.  The top of the import order,
below only the CLI.
"""

"""The stack: what ``ernie-chat up`` runs and keeps running.

``supervisor`` starts vLLM (``engine_args`` builds its command, ``provision``
its environment, on the machines ``platforms`` says it installs on, and the
``demo_model``, ``model_source`` picks the model),
waits for it and starts the Chainlit app; its ``watch_loop`` restarts either
when it dies (``processes``), and failures are explained from vLLM's log
(``vllm_log``, ``doctor``).  It imports the planner (for pre-flight checks) and
the shared modules, never the load tools or the chat app.
"""

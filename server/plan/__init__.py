"""The planner: the KV-cache arithmetic of vLLM, offline.

``kv_planner`` is the pure math (pool, blocks, concurrency, GPU overheads),
``model_config`` reads a model's shape without loading weights, ``device``
reads the memory of this machine, ``preflight`` refuses settings that cannot
work, ``models`` splits one GPU among several models (ERNIE_MODELS), and
``report`` is ``ernie-chat plan``.  Imports only the shared modules.
"""

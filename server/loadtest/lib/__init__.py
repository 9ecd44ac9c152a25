"""What the load tools share: the load and its flags, the server, prompts, the engine's
stream and the chat's socket, vLLM's statistics, client processes, plots, the machine's CPU by
kind of process (``cpu``). No tool's code."""

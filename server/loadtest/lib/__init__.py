"""What the load tools share: the load and its flags, the server, prompts, the engine's
stream and the chat's socket, vLLM's statistics, client processes, plots. No tool's code."""

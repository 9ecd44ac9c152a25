"""``ernie-chat tune``: a sweep of engine settings (``points``), each point's engine started
as the stack starts it (``engine``) and loaded by bench, its runs' statistics (``stats``),
the choice (``choice``) and the results folder (``results``)."""

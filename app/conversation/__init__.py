"""One chat with the model: its history fitted to the window, its settings and personas,
attached files, the reply streamed and shown, its earlier versions, Regenerate, export,
/compare, and what the chat says besides replies (notices, errors, limits).
"""

"""The model's server as the chat talks to it: the client and its errors, a reply sent again
or continued when its engine goes, how prompts are counted, what the server is, its queue,
the served models, and the figures of the replies streaming now and of the last ones.

Nothing here knows about a conversation's history or where chats are kept.
"""

"""Chats kept beyond the worker that runs them: saved chats (ERNIE_CHAT_DB) and their search,
each chat's files without a database, and a chat carried over to another worker (a dead or
drained one) or reopened from the sidebar.
"""

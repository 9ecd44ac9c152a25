"""Simulated users who arrive over a ramp and chat for turns (``model``, ``chats``, ``load``,
``processes``, ``stats``, ``report``), and ``ernie-chat capacity``, which searches how many
of them one machine serves within an objective."""

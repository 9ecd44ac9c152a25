"""One TLS context per process for the HTTP clients that are opened again and again.

httpx builds a new ``ssl.SSLContext`` for every ``Client`` it creates, ``httpx.get`` included,
whatever the URL: it loads every CA certificate of the machine, 21 ms of CPU on a 2-core
machine with Debian's bundle. The supervisor's readiness probe opened one 5 times a second
while a child started, which made `up` busy 10 % of a core just waiting, and the load tools
opened one per simulated user. A client given ``verify=`` one of these contexts skips that;
the contexts trust what httpx's own would (certifi's bundle, or SSL_CERT_FILE and
SSL_CERT_DIR when set).
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def _context(verify: bool) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify)


def shared(verify: bool = True) -> ssl.SSLContext:
    """This process's context: checking certificates, or (``verify=False``) not, for our own
    HAProxy on loopback whose certificate names the machine's public names."""
    return _context(bool(verify))

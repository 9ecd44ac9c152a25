"""A container's health check: exit 0 when the chat's page answers as `up` checks it.

The image's HEALTHCHECK runs ``python -m server.stack.health`` in the container, with the
settings `up` runs with (the environment, .env). It asks what the supervisor asks before it
prints the chat's address, so "healthy" means the engine is ready and a worker serves pages
behind HAProxy when there is one.
"""

from __future__ import annotations

import sys

from server.settings import load_settings
from server.stack.readiness import http_ok

# Longer than http_ok's 2 s: a worker busy streaming to a crowd may answer slowly, and a
# container's check runs every half minute, not in a start-up loop.
TIMEOUT_S = 10.0


def main() -> int:
    url = load_settings().app_url
    if http_ok(url, TIMEOUT_S, verify=False):
        return 0
    print(f"the chat at {url} does not answer 200", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

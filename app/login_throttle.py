"""Slow down password guessing: an exponential wait per user and per client address.

Each key (a user name, a client address) counts its failed logins.  After the
first ``FREE_FAILURES`` (typos), the next attempt on that key is not checked
before ``base * 2^k`` seconds (at most ``max``) have passed since the previous
one started.  An attempt touching two keys waits for the later of the two.

Attempts are *scheduled*, not just delayed: each one is counted as a failure
when it arrives (and cleared if it succeeds), and takes the next free slot of
its keys, so sending guesses in parallel does not get more of them checked.
When a key's queue reaches further ahead than ``max``, the attempt is refused
at once without checking the password (the caller answers 429).

Failures are forgotten gradually (the count halves every ``half_life`` seconds)
and at once after a successful login, so the real user is held up at most
``max`` seconds per attempt while someone guesses their password, and not at
all once the guessing stops.

Pure logic with an injectable clock; ``app/login.py`` wires it to Chainlit.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

# Wrong passwords in a row that cost nothing: typos.
FREE_FAILURES = 2
# Past this many keys, idle ones are dropped (random user names must not fill memory).
MAX_KEYS = 10_000


@dataclass(frozen=True)
class DelayPolicy:
    base_s: float = 1.0
    max_s: float = 30.0
    half_life_s: float = 600.0

    def delay(self, failures: float) -> float:
        """Seconds the next attempt waits after ``failures`` (possibly decayed) failures."""
        if failures <= FREE_FAILURES:
            return 0.0
        return min(self.max_s, self.base_s * 2 ** (failures - FREE_FAILURES - 1))


@dataclass
class _KeyState:
    failures: float = 0.0
    updated: float = 0.0   # when ``failures`` was last decayed
    ready_at: float = 0.0  # no attempt on this key is checked before this time


@dataclass
class LoginThrottle:
    policy: DelayPolicy = field(default_factory=DelayPolicy)
    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, _KeyState] = field(default_factory=dict)

    def _state(self, key: str, now: float) -> _KeyState:
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= MAX_KEYS:
                self._forget_idle(now)
            state = self._keys[key] = _KeyState(updated=now)
        state.failures *= 0.5 ** ((now - state.updated) / self.policy.half_life_s)
        state.updated = now
        return state

    def _forget_idle(self, now: float) -> None:
        for key, state in list(self._keys.items()):
            if state.ready_at <= now and self.policy.delay(state.failures + 1) == 0:
                del self._keys[key]

    def reserve(self, keys: Iterable[str]) -> Optional[float]:
        """Seconds this attempt must wait before its password is checked; None: refuse it now."""
        now = self.clock()
        states = [self._state(key, now) for key in keys]
        start = max([now] + [s.ready_at for s in states])
        if start - now > self.policy.max_s:
            return None
        for state in states:
            state.failures += 1  # until it succeeds: parallel attempts see it at once
            state.ready_at = start + self.policy.delay(state.failures)
        return start - now

    def retry_after(self, keys: Iterable[str]) -> float:
        """For a refused attempt: seconds until its keys take attempts again."""
        now = self.clock()
        return max([0.0] + [self._keys[k].ready_at - now for k in keys if k in self._keys])

    def succeeded(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._keys.pop(key, None)


def address_key(address: str) -> str:
    """One key per IPv4 address, one per IPv6 /64 (what one machine usually holds)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"addr:{address[:64]}"
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return f"addr:{ip.ipv4_mapped}"
        return f"addr:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"addr:{ip}"


def attempt_keys(username: str, address: str) -> tuple[str, str]:
    return f"user:{username[:200]}", address_key(address)

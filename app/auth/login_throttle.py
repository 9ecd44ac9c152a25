"""Slow down password guessing without letting a guesser lock anyone out.

OWASP's "device cookie" design.  A browser that logged in as a user before carries a
signed cookie naming that user (``app/auth/device_cookie.py``); its attempts at that user
count on one key of their own, the device's, so whoever guesses elsewhere never slows
them.  Every other attempt is *untrusted* and counts on three keys:

- its client address: guessing any names from one address (several people behind
  one NAT make typos too, hence more free failures);
- the pair (user, address): guessing one user from one address;
- the user, for untrusted devices only: guessing one user from many addresses.

Each key counts its failed logins.  After its free failures, the next attempt on it is
not checked before ``base * 2^k`` seconds (at most ``max``) after the previous one's
check.  Attempts are *scheduled*, not just delayed: each one is counted as a failure
when it arrives and takes the next free slot of all its keys, so guesses sent in
parallel (to any worker: the counts are shared, ``server/auth_store.py``) do not get
more of them checked.  When a key's queue reaches further ahead than its ``max``, the
attempt is refused at once without a check (the caller answers 429) and counts nowhere.

The user key is lenient.  One address is held to one check per ``max`` seconds by its
own keys (two a minute with the defaults), and failures halve every ``half_life``, so
one address keeps at most ``half_life / (max * ln 2)`` failures alive on it (29 with
the defaults), plus its first burst (under 10), which fades.  The user key lets twice
that many through free: one guessing address never slows a user's new device, however
long it guesses.  Several addresses guessing one user at full speed do: its new
devices then wait up to ``max`` per attempt and, past a queue of ``max`` seconds, are
refused until the guessing stops; a device the user logged in from before is never
slowed by them.  That is the price of bounding guesses from many addresses.

A success forgives only what the user did from where they are (the pair key, or the
device key) and refunds its own count on the other keys; it never clears an address's
failures, so logging into one's own account does not buy more guesses at another's.

Pure logic on key states with the time passed in; ``LoginThrottle`` is the thin I/O
around it, and ``app/auth/login.py`` wires it to Chainlit.
"""

from __future__ import annotations

import ipaddress
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

from server.auth_store import AuthStore, KeyState

# Wrong passwords in a row that cost nothing on a user's keys: typos.
FREE_FAILURES = 2
# An address may be shared by several people (a NAT, a proxy): more room for their typos.
ADDRESS_FREE_FAILURES = 10
# A key idle this many half-lives keeps under a millionth of its failures: its row goes.
FORGET_AFTER_HALF_LIVES = 20


@dataclass(frozen=True)
class DelayPolicy:
    base_s: float = 1.0
    max_s: float = 30.0
    half_life_s: float = 600.0
    free_failures: int = FREE_FAILURES

    def delay(self, failures: float) -> float:
        """Seconds the next attempt waits after ``failures`` (possibly decayed) failures."""
        if failures <= self.free_failures:
            return 0.0
        return min(self.max_s, self.base_s * 2 ** (failures - self.free_failures - 1))


@dataclass(frozen=True)
class Policies:
    """The policy of each kind of key, from the settings' base, max and half-life."""

    user: DelayPolicy          # the pair (user, address), and a trusted device
    address: DelayPolicy
    new_device_user: DelayPolicy

    @classmethod
    def from_delays(cls, base_s: float, max_s: float, half_life_s: float) -> "Policies":
        one_address = half_life_s / (max_s * math.log(2))  # failures one address keeps alive
        return cls(user=DelayPolicy(base_s, max_s, half_life_s),
                   address=DelayPolicy(base_s, max_s, half_life_s, ADDRESS_FREE_FAILURES),
                   new_device_user=DelayPolicy(base_s, max_s, half_life_s,
                                               math.ceil(2 * one_address)))

    @property
    def half_life_s(self) -> float:
        return self.user.half_life_s


@dataclass(frozen=True)
class Plan:
    """The keys one attempt counts on, and those its success forgives."""

    keys: dict[str, DelayPolicy]
    forgiven_on_success: tuple[str, ...]


def attempt_plan(policies: Policies, username: str, address: str, device: Optional[str]) -> Plan:
    """``device``: the id from a valid device cookie naming this user, else None."""
    if device is not None:
        key = f"device:{device}"
        return Plan({key: policies.user}, (key,))
    user = username[:200]
    pair = f"pair:{address_key(address)}:{user}"
    return Plan({address_key(address): policies.address, pair: policies.user,
                 f"newdev:{user}": policies.new_device_user}, (pair,))


@dataclass(frozen=True)
class Decision:
    wait_s: Optional[float]  # seconds before the password is checked; None: refused now
    retry_after_s: float = 0.0


def _decayed(states: dict[str, KeyState], key: str, policy: DelayPolicy, now: float) -> KeyState:
    state = states.setdefault(key, KeyState(updated=now))
    state.failures *= 0.5 ** (max(0.0, now - state.updated) / policy.half_life_s)
    state.updated = now
    return state


def schedule(states: dict[str, KeyState], plan: Plan, now: float) -> Decision:
    """Count the attempt on its keys and give it their next common slot, or refuse it."""
    current = {key: _decayed(states, key, policy, now) for key, policy in plan.keys.items()}
    ahead = {key: state.ready_at - now for key, state in current.items()}
    if any(ahead[key] > policy.max_s for key, policy in plan.keys.items()):
        return Decision(None, max(ahead.values()))
    start = max([now] + [state.ready_at for state in current.values()])
    for key, policy in plan.keys.items():
        state = current[key]
        state.failures += 1  # until it succeeds: parallel attempts see it at once
        # A key with no delay keeps its slot: another key's later slot must not hold it.
        if (delay := policy.delay(state.failures)) > 0:
            state.ready_at = start + delay
    return Decision(start - now)


def forgive(states: dict[str, KeyState], plan: Plan, now: float) -> None:
    """A success: forget the user's own keys, take back its count on the others."""
    for key, policy in plan.keys.items():
        if key in plan.forgiven_on_success:
            states.pop(key, None)
        else:
            state = _decayed(states, key, policy, now)
            state.failures = max(0.0, state.failures - 1)


class LoginThrottle:
    """``schedule`` and ``forgive`` on the shared store, on the wall clock (rows outlive us)."""

    def __init__(self, store: AuthStore, policies: Policies, clock: Callable[[], float] = time.time):
        self.store, self.policies, self.clock = store, policies, clock

    def plan(self, username: str, address: str, device: Optional[str]) -> Plan:
        return attempt_plan(self.policies, username, address, device)

    async def reserve(self, plan: Plan) -> Decision:
        now = self.clock()
        return await self.store.update_keys(list(plan.keys), lambda states: schedule(states, plan, now),
                                            self._forget_before(now))

    async def succeeded(self, plan: Plan) -> None:
        now = self.clock()
        await self.store.update_keys(list(plan.keys), lambda states: forgive(states, plan, now),
                                     self._forget_before(now))

    def _forget_before(self, now: float) -> float:
        return now - FORGET_AFTER_HALF_LIVES * self.policies.half_life_s


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

"""Login passwords: bcrypt hashes in ERNIE_USERS, checked in constant time.

An entry of ERNIE_USERS is ``name:secret``, where the secret is best a bcrypt hash
made by ``ernie-chat hash-password`` (``$2b$12$`` and 53 characters of ``./A-Za-z0-9``:
no comma and no colon, so the comma-separated list still parses).  A plain password
still works, so that an existing .env keeps working, but every start warns about it
(``plain_warning``): whoever reads .env, a backup or the process environment would
read the password itself, which people reuse elsewhere.

bcrypt, not argon2: its hashes fit the list format as they are, and the package is one
self-contained wheel.  bcrypt reads at most 72 bytes of a password; longer ones are
refused when hashing rather than cut silently.
"""

from __future__ import annotations

import hmac
import re
from typing import Optional

import bcrypt

from server.errors import BadInput

# 2^12 rounds: 0.2-0.4 s per check on our 2-core machines (docs/notes.md, "Login").
ROUNDS = 12
MAX_BYTES = 72
HASH = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")
# Compared against when the user does not exist, so that an unknown name takes as
# long as a wrong password and the timing does not tell which names exist. (The hash
# of 32 random bytes, thrown away; made once, since hashing at import costs 0.3 s.)
_DUMMY = "$2b$12$0gSzNzu1M8087gZVqIxNie/N4412gajqBY4FcX3XRNRWiriLZc6fm"


def hash_password(password: str, rounds: int = ROUNDS) -> str:
    """The bcrypt hash to put in ERNIE_USERS; refuses what bcrypt cannot hold."""
    data = password.encode("utf-8")
    if not data:
        raise BadInput("The password is empty: type one (nothing was hashed).")
    if len(data) > MAX_BYTES:
        raise BadInput(f"The password is {len(data)} bytes long; bcrypt uses at most {MAX_BYTES} "
                       "bytes of it. Choose a shorter one (nothing was hashed).")
    return bcrypt.hashpw(data, bcrypt.gensalt(rounds)).decode()


def is_hash(secret: str) -> bool:
    return bool(HASH.match(secret))


def looks_like_broken_hash(secret: str) -> bool:
    """Starts like a bcrypt hash but is not a whole one: cut, or mangled by a shell's $."""
    return secret.startswith("$2") and not is_hash(secret)


def matches(secret: str, password: str) -> bool:
    """Does ``password`` match the stored secret (a bcrypt hash, or a plain password)?"""
    data = password.encode("utf-8")
    if is_hash(secret):
        # bcrypt refuses over-long input; no stored hash can be of such a password.
        return len(data) <= MAX_BYTES and bcrypt.checkpw(data, secret.encode())
    # As slow as a hash's check: answered in microseconds, a plain-text user's name would
    # stand out from the names that do not exist, which cost a bcrypt check (_DUMMY).
    if len(data) <= MAX_BYTES:
        bcrypt.checkpw(data, _DUMMY.encode())
    return hmac.compare_digest(secret.encode("utf-8"), data)


def check_password(users: dict[str, str], username: str, password: str) -> Optional[str]:
    """The user's name when the password matches, else None; slow on purpose (bcrypt)."""
    secret = users.get(username)
    if secret is None:
        matches(_DUMMY, password)
        return None
    return username if matches(secret, password) else None


def plain_users(users: dict[str, str]) -> list[str]:
    return sorted(name for name, secret in users.items() if not is_hash(secret))


def plain_warning(users: dict[str, str]) -> Optional[str]:
    """What to tell the operator when some passwords are stored in plain text."""
    names = plain_users(users)
    if not names:
        return None
    return (f"WARNING: ERNIE_USERS holds the password of {', '.join(names)} in plain text: anyone "
            "who reads .env or the environment can read it. Replace each with its hash: "
            "./scripts/ernie-chat hash-password --user NAME (if you did set a hash, a shell ate "
            "its $ parts: put the value in single quotes)")

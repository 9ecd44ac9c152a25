"""Who may log in, how guessing is slowed, and how long a login lasts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from pydantic import AfterValidator, BaseModel, Field, SecretStr

from server.passwords import looks_like_broken_hash


def checked_user_pairs(value: Optional[SecretStr]) -> Optional[SecretStr]:
    if value is None or not value.get_secret_value().strip():
        return None
    for pair in value.get_secret_value().split(","):
        name, sep, password = pair.strip().partition(":")
        if not (sep and name.strip() and password):
            # Never echo the value: it holds passwords.
            raise ValueError("must be user:password pairs separated by commas, "
                             "e.g. alice:pw1,bob:pw2 (a pair is missing its name or password)")
        if looks_like_broken_hash(password):
            raise ValueError(f"the password of {name.strip()!r} starts like a bcrypt hash but is "
                             "not a whole one (60 characters): copy the whole line "
                             "`ernie-chat hash-password` printed, in single quotes in a shell "
                             "(double quotes let the shell eat the $ parts)")
    return value


def checked_names(value: Optional[str]) -> Optional[str]:
    if value is None or not value.strip():
        return None
    if any(not name.strip() for name in value.split(",")):
        raise ValueError("must be login names separated by commas, e.g. alice,bob (one is empty)")
    return value


class LoginSettings(BaseModel):
    users: Annotated[Optional[SecretStr], AfterValidator(checked_user_pairs)] = Field(
        None,
        description="Who may log in: name:secret pairs, comma-separated. The secret is best the "
        "bcrypt hash `ernie-chat hash-password` prints (alice:$2b$12$...; single-quote it in a "
        "shell); a plain password works but every start warns about it.",
    )
    admins: Annotated[Optional[str], AfterValidator(checked_names)] = Field(
        None,
        description="Who of ERNIE_USERS may open the admin page (/admin: users, chats, messages, "
        "tokens and errors per day): login names, comma-separated. Unset: nobody.",
    )
    login_delay_base_s: float = Field(
        1.0, gt=0, description="Wait before the next login attempt once a key (a user from one address "
        "or device; an address) used its free failures; it doubles with each further failure.")
    login_delay_max_s: float = Field(
        30.0, gt=0, description="Longest wait between two login attempts on one key; past a queue this "
        "long they get 429. A user's known browser is never held up by guessing elsewhere.")
    login_delay_half_life_s: float = Field(
        600.0, gt=0, description="Failed logins are forgotten gradually: their count halves every this "
        "many seconds. A success clears only that user's own count there, never an address's.")
    auth_db: Path = Field(
        Path("data/auth.db"), description="SQLite file (mode 0600) the app workers share for login "
        "counts, sign-outs and per-user limit counts, kept across restarts; with a PostgreSQL "
        "ERNIE_CHAT_DB, that instead.")
    session_lifetime_s: int = Field(15 * 24 * 3600, ge=60, description="How long a login lasts unless "
        "ended: logout, a new password or removal in ERNIE_USERS, `ernie-chat revoke-sessions NAME`.")

    def problems(self) -> list[str]:
        if self.chat_db is not None and not self.login_on:
            return ["ERNIE_CHAT_DB turns on saved chats, which need a login: set "
                    "ERNIE_USERS=name:password (comma-separated for several) or ERNIE_OIDC_ISSUER"]
        if unknown := sorted(self.admin_names - set(self.user_passwords)):
            return [f"ERNIE_ADMINS names {', '.join(unknown)}, not in ERNIE_USERS: an admin logs in "
                    "with a password of ERNIE_USERS (one who signs in through the provider is an "
                    "admin by ERNIE_OIDC_ADMIN_GROUP)"]
        return []

    @property
    def login_on(self) -> bool:
        """Passwords, a provider, or both."""
        return self.users is not None or self.oidc_issuer is not None

    @property
    def admin_names(self) -> frozenset[str]:
        return frozenset(name.strip() for name in (self.admins or "").split(",") if name.strip())

    @property
    def user_passwords(self) -> dict[str, str]:
        if self.users is None:
            return {}
        pairs = (p.strip().partition(":") for p in self.users.get_secret_value().split(","))
        return {name.strip(): password for name, _, password in pairs}

"""Session ids that come from the network are checked before Chainlit uses them as paths.

Chainlit 2.12 (the newest release at the time of writing) takes a chat session's id from
the client: the socket's ``auth["sessionId"]`` is stored unchecked (``chainlit/socket.py``,
``connect``), the session's files live in ``FILES_DIRECTORY / id`` (``session.py``,
``files_dir``), and ending the session runs ``shutil.rmtree`` on that path.  An id such as
``../../x`` or ``/abs/path`` therefore let any client that reaches the chat (signed in or
not, when login is off) delete a directory of the server's with one ``clear_session`` and
a disconnect, and write files there through ``POST /project/file?session_id=...``.

The browser's client makes every id with ``uuid.v4()``, so three guards accept nothing
else, each where Chainlit reads the id:

* the socket's ``connect`` handler refuses any other id before Chainlit stores it;
* the upload route answers 400 for any other ``session_id`` (``app/web/upload_check.py``);
* ``files_dir`` never leaves the files directory, whatever an id is (a last line, should a
  session be made some other way).

Drop this module when Chainlit validates session ids itself (tests/app/test_session_guard.py
performs the attack: it fails once the guard is gone and Chainlit still uses the id as is).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
REFUSAL = "invalid session id: a chat session id is a UUID"


def valid_session_id(value: object) -> bool:
    return isinstance(value, str) and SESSION_ID.fullmatch(value) is not None


def contained_dir(base: Path, session_id: str) -> Path:
    """The session's own folder under ``base``: any id that is not a UUID is hashed into one."""
    if valid_session_id(session_id):
        return base / session_id
    return base / f"invalid-{hashlib.sha256(session_id.encode('utf-8', 'replace')).hexdigest()[:16]}"


def _guard_connect(sio) -> None:
    """Wrap the connect handler Chainlit registered on the default namespace."""
    chainlit_connect = sio.handlers["/"]["connect"]

    async def connect(sid, environ, auth=None):
        if not isinstance(auth, dict) or not valid_session_id(auth.get("sessionId")):
            raise ConnectionRefusedError(REFUSAL)
        return await chainlit_connect(sid, environ, auth)

    sio.handlers["/"]["connect"] = connect


def _guard_files_dir() -> None:
    import chainlit.config
    from chainlit.session import BaseSession

    # Read at each use, like Chainlit does: app/web/files_dir.py points it at a worker's own folder.
    BaseSession.files_dir = property(lambda self: contained_dir(chainlit.config.FILES_DIRECTORY, self.id))


def install() -> None:
    import chainlit.socket  # noqa: F401  (registers Chainlit's handlers on the server)
    from chainlit.server import sio

    _guard_connect(sio)
    _guard_files_dir()

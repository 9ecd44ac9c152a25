"""Earlier versions of a turn, kept when it is regenerated or its message edited.

A turn is a user message and its reply.  Each of its versions is that turn as it was
shown, with every turn that followed it then (an edit forgets what came after; a
regeneration, only offered on the last turn, has nothing after it).  One version is
shown, and the model's history (:class:`Conversation`) holds that one: switching puts
the chosen version's turns in place of the shown one's.

The versions travel in the reply's metadata (:func:`to_metadata`), so a saved chat gets
them back.  The switcher's action payloads come from the browser: :func:`checked` takes
only a turn of this chat's book, shown now, under its own reply, and a version it has.
Pure logic: app/conversation/switcher.py shows it in the chat.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from app.conversation.history import Conversation, Turn

KEY = "versions"  # in a reply's metadata
# A turn keeps this many versions, the oldest going first: each holds what followed it,
# and the whole set rides in one step's metadata.
MAX_VERSIONS = 20


@dataclass
class Versions:
    """One turn's versions: each the turn and the turns after it; ``shown`` indexes one."""

    reply_id: str  # the reply message that carries the switcher
    versions: list[list[Turn]]
    shown: int

    def label(self) -> tuple[int, int]:
        """(k, N) as the switcher writes "k/N"."""
        return self.shown + 1, len(self.versions)


Book = dict[str, Versions]  # by the user message's id


def turn_index(conversation: Conversation, message_id: str) -> Optional[int]:
    """Where the answered ``message_id``'s turn is in the history; None if it has none (not
    asked, or its reply failed and the next message's turn took its place)."""
    if message_id not in conversation.asked:
        return None
    index = conversation.asked[message_id][0]
    ids = list(conversation.asked)
    later = ids[ids.index(message_id) + 1:]
    if index >= len(conversation.turns) or (later and conversation.asked[later[0]][0] <= index):
        return None
    return index


def snapshot(book: Book, conversation: Conversation, message_id: str) -> None:
    """Before ``message_id`` is answered again: keep its turn as shown now, with what followed."""
    index = turn_index(conversation, message_id)
    if index is None:
        return
    shown = [_copy(turn) for turn in conversation.turns[index:]]
    entry = book.get(message_id)
    if entry is None:
        book[message_id] = Versions("", [shown], 0)  # its reply is known once it is made
    else:
        entry.versions[entry.shown] = shown


def settle(book: Book, conversation: Conversation, message_id: str, reply_id: str) -> Optional[Versions]:
    """After ``message_id``'s new reply entered the history: it is the newest version, shown.
    Returns the turn's versions when it has earlier ones (the switcher is due)."""
    entry = book.get(message_id)
    index = turn_index(conversation, message_id)
    if entry is None or index is None:
        return None  # a failed reply: the version kept waits for the next one
    prune(book, conversation)
    entry.versions.append([_copy(turn) for turn in conversation.turns[index:]])
    del entry.versions[:-MAX_VERSIONS]
    entry.shown, entry.reply_id = len(entry.versions) - 1, reply_id
    return entry


def prune(book: Book, conversation: Conversation) -> None:
    """Forget the versions of turns that left the history (an edit above them)."""
    for message_id in [m for m in book if turn_index(conversation, m) is None]:
        del book[message_id]


def choose(book: Book, conversation: Conversation, message_id: str, to: int) -> list[Turn]:
    """Show version ``to``: the shown one is kept as it is now, the chosen one's turns go in
    its place in the history; returned, to be shown.  ``to`` comes from :func:`checked`."""
    entry = book[message_id]
    snapshot(book, conversation, message_id)
    index = conversation.asked[message_id][0]
    chosen = [_copy(turn) for turn in entry.versions[to]]
    conversation.turns[index:] = chosen
    ids = list(conversation.asked)
    for later in ids[ids.index(message_id) + 1:]:
        del conversation.asked[later]
        book.pop(later, None)  # their messages go; what followed is shown without its versions
    conversation.asked[message_id] = (index, chosen[0].user)
    entry.shown = to
    return chosen


def asked_again(conversation: Conversation, message_id: str, index: int, user: str) -> None:
    """A turn of a chosen version, shown again as a new message ``message_id``."""
    conversation.asked[message_id] = (index, user)


def checked(payload: Any, for_id: Any, book: Book, conversation: Conversation) -> Optional[tuple[str, int]]:
    """(message id, version) of a switcher click, or None for anything this chat did not
    offer: another chat's or a gone turn, another message's button, a version it lacks."""
    if not isinstance(payload, dict) or set(payload) != {"turn", "to"}:
        return None
    message_id, to = payload["turn"], payload["to"]
    if not isinstance(message_id, str) or type(to) is not int:  # bool is an int too
        return None
    entry = book.get(message_id)
    if entry is None or for_id != entry.reply_id or turn_index(conversation, message_id) is None:
        return None
    if not 0 <= to < len(entry.versions) or to == entry.shown:
        return None
    return message_id, to


def payload(message_id: str, entry: Versions, step: int) -> dict:
    """The payload of the button that moves ``step`` (-1, 0, +1) from the shown version."""
    return {"turn": message_id, "to": min(max(entry.shown + step, 0), len(entry.versions) - 1)}


def to_metadata(message_id: str, entry: Versions) -> dict:
    return {"turn": message_id, "shown": entry.shown,
            "list": [[asdict(turn) for turn in version] for version in entry.versions]}


def from_metadata(data: Any, reply_id: str) -> Optional[tuple[str, Versions]]:
    """A saved reply's versions (:func:`to_metadata`); None if they are not whole."""
    try:
        message_id, shown, listed = data["turn"], data["shown"], data["list"]
        versions = [[Turn(str(t["user"]), str(t["assistant"]), dict(t.get("figures") or {}))
                     for t in version] for version in listed]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if (not isinstance(message_id, str) or type(shown) is not int or not 0 <= shown < len(versions)
            or len(versions) > MAX_VERSIONS or not all(versions)):
        return None
    return message_id, Versions(reply_id, versions, shown)


def _copy(turn: Turn) -> Turn:
    return Turn(turn.user, turn.assistant, dict(turn.figures))

"""socket.io's emit to one client, without a task and a wait per frame (imported by app/chat.py).

Every event Chainlit sends a chat (each streamed frame, ``stream_token``) goes through
python-socketio 5.x's ``AsyncManager.emit`` with ``to=`` the chat's socket: it encodes the
packet once, then starts an ``asyncio`` task per recipient to hand it to engine.io, and
waits for them all with ``asyncio.wait``. For the one recipient a chat has, that task,
its wait and their callbacks are most of what an emit costs the event loop
(docs/performance.md, "The app's cost per token"). Here an emit to one client hands the
same encoded packet to the same ``_send_eio_packet`` directly; every other emit (a room of
several, a skip list, a callback, binary attachments) is socket.io's own.

The packet, its order on the socket (engine.io's queue per client) and what the browser
receives are unchanged; only the task around the hand-over is gone. A failure to hand it over
(the client's socket closed meanwhile) stays the emitter's business as little as before: a
reply goes on streaming, and being kept, for a browser that left.
``tests/unit/test_socketio_emit.py`` checks the bytes against socket.io's own emit.
"""

from __future__ import annotations

from engineio import packet as eio_packet
from socketio import packet
from socketio.async_manager import AsyncManager

SOCKETIO_EMIT = AsyncManager.emit
SCALARS = (str, bool, int, float, type(None))


def flat(data) -> bool:
    """A dict of plain values (a streamed frame's: id, token, two flags), which holds no binary
    attachment: socket.io then need not walk it to find out (its ``data_is_binary``, a
    recursive walk, was the top function of a crowd's profile at 3.5 % of a worker's CPU)."""
    return isinstance(data, dict) and all(isinstance(value, SCALARS) for value in data.values())


async def emit(self, event, data, namespace, room=None, skip_sid=None, callback=None, to=None, **kwargs):
    room = to or room
    if callback or skip_sid is not None or not isinstance(room, str) or isinstance(data, tuple):
        return await SOCKETIO_EMIT(self, event, data, namespace, room=room, skip_sid=skip_sid,
                                   callback=callback, **kwargs)
    participants = list(self.get_participants(namespace, room)) if namespace in self.rooms else []
    encoded = (self.server.packet_class(packet.EVENT, namespace=namespace,
                                        data=[event] + ([] if data is None else [data]),
                                        binary=False if flat(data) else None).encode()
               if len(participants) == 1 else None)
    if not isinstance(encoded, str):  # nobody, several, or binary attachments (a list of packets)
        return await SOCKETIO_EMIT(self, event, data, namespace, room=room, skip_sid=skip_sid,
                                   callback=callback, **kwargs)
    try:
        await self.server._send_eio_packet(participants[0][1], eio_packet.Packet(eio_packet.MESSAGE, encoded))
    except Exception:  # a closed socket: socket.io's tasks keep such failures from the emitter too
        self.server.logger.info("emit %s to a closed socket", event, exc_info=True)


AsyncManager.emit = emit

"""app/web/socketio_emit.py: an emit to one client hands socket.io's own packet to engine.io
directly; the bytes, their order and every other kind of emit are socket.io's."""

from __future__ import annotations

import socketio
from engineio import exceptions

from app.web import socketio_emit


async def server_with_clients(count: int):
    """A socket.io server whose engine.io hand-over is recorded, with ``count`` clients."""
    server = socketio.AsyncServer(async_mode="asgi")
    handed: list[tuple[str, str]] = []

    async def send_eio_packet(eio_sid, pkt):
        handed.append((eio_sid, pkt.encode()))
    server._send_eio_packet = send_eio_packet
    sids = [await server.manager.connect(f"eio{i}", "/") for i in range(count)]
    return server, sids, handed


async def test_an_emit_to_one_client_hands_over_the_same_packets_in_the_same_order(monkeypatch):
    server, (sid,), handed = await server_with_clients(1)
    events = [("stream_token", {"id": "m1", "token": "héllo \"x\"", "isSequence": False, "isInput": None}),
              ("new_message", {"id": "m1", "output": "$5 and $10"}), ("task_end", None)]
    for event, data in events:
        await socketio_emit.SOCKETIO_EMIT(server.manager, event, data, "/", to=sid)
    theirs, handed[:] = list(handed), []

    async def not_socketios(*args, **kwargs):
        raise AssertionError("an emit to one client went through socket.io's tasks")
    monkeypatch.setattr(socketio_emit, "SOCKETIO_EMIT", not_socketios)
    assert socketio.AsyncManager.emit is socketio_emit.emit
    for event, data in events:
        await server.manager.emit(event, data, "/", to=sid)
    assert handed == theirs and len(theirs) == 3 and theirs[0][0] == "eio0"


async def test_a_room_of_several_a_skip_list_and_a_callback_are_socketios_own(monkeypatch):
    server, sids, handed = await server_with_clients(2)
    await server.manager.enter_room(sids[1], "/", "both")
    await server.manager.enter_room(sids[0], "/", "both")
    own = []

    async def socketio_emit_recorded(self, event, data, namespace, **kwargs):
        own.append(event)
    monkeypatch.setattr(socketio_emit, "SOCKETIO_EMIT", socketio_emit_recorded)
    await server.manager.emit("to-both", {}, "/", room="both")
    await server.manager.emit("skipping", {}, "/", to=sids[0], skip_sid=sids[1])
    await server.manager.emit("with-ack", {}, "/", to=sids[0], callback=lambda *a: None)
    await server.manager.emit("bytes", b"\x00", "/", to=sids[0])
    await server.manager.emit("bytes-inside", {"name": "a.bin", "content": b"\x00"}, "/", to=sids[0])
    await server.manager.emit("nobody", {}, "/", to="no-such-sid")
    assert own == ["to-both", "skipping", "with-ack", "bytes", "bytes-inside", "nobody"] and handed == []


async def test_a_closed_socket_does_not_break_the_emitter():
    server, (sid,), _ = await server_with_clients(1)

    async def closed(eio_sid, pkt):
        raise exceptions.SocketIsClosedError()
    server._send_eio_packet = closed
    await server.manager.emit("stream_token", {"id": "m1", "token": "x"}, "/", to=sid)  # no error

"""Chainlit chat users in Locust (gevent, python-socketio's sync client): the evaluation."""
import time, uuid
from datetime import datetime, timezone

import gevent.event
from locust import between, task
from locust.contrib.socketio import SocketIOUser


class ChatUser(SocketIOUser):
    wait_time = between(0.25, 0.75)   # think time
    options = {"reconnection": False}

    def on_start(self):
        self.opened, self.turn_done = gevent.event.Event(), gevent.event.Event()
        self.welcomed, self.in_turn, self.sent_at, self.first = False, False, None, None
        self.sio.on("*", self.on_any)
        self.sio.connect(self.host, socketio_path="/ws/socket.io", transports=["websocket"],
                         auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": "",
                               "userEnv": "{}", "chatProfile": ""})
        self.sio.emit("connection_successful")
        self.opened.wait(60)

    def on_any(self, event, data=None):
        if not isinstance(data, dict):
            return
        kind = (data.get("metadata") or {}).get("kind")
        if event == "task_start" and self.sent_at is not None:
            self.in_turn = True
        elif event == "task_end":
            if self.in_turn:
                self.turn_done.set()
            elif self.welcomed:
                self.opened.set()
        elif event == "new_message" and kind == "welcome":
            self.welcomed = True
        elif event == "stream_start" and kind == "reply" and self.first is None:
            self.first = time.perf_counter()

    @task
    def ask(self):
        self.turn_done.clear(); self.in_turn = False; self.first = None
        step = {"threadId": "", "id": str(uuid.uuid4()), "name": "User", "type": "user_message",
                "output": "Tell me about the weather today.",
                "createdAt": datetime.now(timezone.utc).isoformat(), "metadata": {}}
        self.sent_at = time.perf_counter()
        self.sio.emit("client_message", {"message": step, "fileReferences": []})
        ok = self.turn_done.wait(120)
        total = (time.perf_counter() - self.sent_at) * 1000
        self.environment.events.request.fire(
            request_type="CHAT", name="reply", response_time=total, response_length=0,
            exception=None if ok else TimeoutError("no reply"), context={})

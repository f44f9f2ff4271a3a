"""A hand-written Feishu / Lark long-connection stand-in.

`POST /callback/ws/endpoint` with `{"AppID", "AppSecret"}` answers `{"code": 0, "data": {"URL":
"ws://…/ws?device_id=…&service_id=…", "ClientConfig": {…}}}` (wrong credentials: a non-zero code).
The WebSocket carries binary protobuf frames (`pbbp2.Frame`: SeqID 1, LogID 2, service 3, method 4
— 0 control, 1 data —, headers 5 as `{key 1, value 2}`, payload_encoding 6, payload_type 7,
payload 8, LogIDNew 9), encoded and decoded here by hand from that schema: the client pings with a
control frame (`type: ping`) and gets a `pong`; an event is a data frame with headers `type:
event`, `message_id`, `trace_id`, `sum: 1`, `seq: 0` and the event's JSON as payload; the client
acks by sending the frame back with the payload `{"code": 200}` (500: not handled, Feishu resends).
Its URL is the Feishu API base, so replies (`/open-apis/im/v1/messages/…`) are recorded by `Vendor`.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse

from genworker.testing.longconn.base import Connection, StandIn

__all__ = ["FeishuLongConnection", "LarkFrame", "decode_frame", "encode_frame", "message_event"]

CONTROL, DATA = 0, 1
SERVICE_ID = 77


@dataclass
class LarkFrame:
    seq_id: int = 0
    log_id: int = 0
    service: int = SERVICE_ID
    method: int = DATA
    headers: list[tuple[str, str]] = field(default_factory=list)
    payload: bytes = b""

    def header(self, key: str) -> str | None:
        return next((v for k, v in self.headers if k == key), None)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def encode_frame(frame: LarkFrame) -> bytes:
    headers = b"".join(
        _field(5, _field(1, k.encode()) + _field(2, v.encode())) for k, v in frame.headers
    )  # fmt: skip
    out = _field(1, frame.seq_id) + _field(2, frame.log_id) + _field(3, frame.service) + _field(4, frame.method)
    return out + headers + (_field(8, frame.payload) if frame.payload else b"")


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    found: list[tuple[int, int | bytes]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            found.append((number, varint()))
        elif kind == 2:
            size = varint()
            found.append((number, data[at : at + size]))
            at += size
        else:
            raise ValueError(f"wire type {kind} is not used by pbbp2.Frame")
    return found


def decode_frame(data: bytes) -> LarkFrame:
    frame = LarkFrame(service=0, method=-1)
    for number, value in _fields(data):
        if isinstance(value, int):
            if number == 1:
                frame.seq_id = value
            elif number == 2:
                frame.log_id = value
            elif number == 3:
                frame.service = value
            elif number == 4:
                frame.method = value
        elif number == 5:
            pair = dict(_fields(value))
            key, val = pair.get(1, b""), pair.get(2, b"")
            assert isinstance(key, bytes) and isinstance(val, bytes)
            frame.headers.append((key.decode(), val.decode()))
        elif number == 8:
            frame.payload = value
    assert frame.method in (CONTROL, DATA), f"a frame without method: {data!r}"
    return frame


def message_event(text: str, message_id: str, *, chat_id: str = "oc_p2p", chat_type: str = "p2p",
                  sender: str = "ou_peer", **message: Any) -> dict[str, Any]:  # fmt: skip
    """An `im.message.receive_v1` event (schema 2.0) as Feishu pushes it."""
    return {
        "schema": "2.0",
        "header": {"event_id": uuid.uuid4().hex, "event_type": "im.message.receive_v1", "create_time": "1700000000000",
                   "token": "", "app_id": "cli_standin", "tenant_key": "tk"},
        "event": {
            "sender": {"sender_id": {"open_id": sender}, "sender_type": "user"},
            "message": {"message_id": message_id, "chat_id": chat_id, "chat_type": chat_type, "message_type": "text",
                        "content": json.dumps({"text": text}), **message},
        },
    }  # fmt: skip


class FeishuLongConnection(StandIn):
    def __init__(self, app_id: str, app_secret: str) -> None:
        super().__init__()
        self.app_id, self.app_secret = app_id, app_secret
        self._devices = itertools.count(1)
        self._seq = itertools.count(1)

    def routes(self, app: FastAPI) -> None:
        @app.post("/callback/ws/endpoint")
        async def endpoint(request: Request) -> JSONResponse:
            body = await request.json()
            with self.changed:
                self.opened.append(body)
            if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
                return JSONResponse({"code": 10003, "msg": "invalid app_id or app_secret"})
            ws = str(request.url_for("feishu_ws")).replace("http:", "ws:", 1)
            config = {"ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30, "PingInterval": 120}
            url = f"{ws}?device_id=dev{next(self._devices)}&service_id={SERVICE_ID}"
            return JSONResponse({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}})

        @app.websocket("/ws", name="feishu_ws")
        async def feishu_ws(socket: WebSocket) -> None:
            await self.serve_socket(socket, device_id=socket.query_params.get("device_id"))

    def frame(self, connection: Connection, data: str | bytes) -> tuple[str, Any] | None:
        assert isinstance(data, bytes), "Feishu frames are binary"
        frame = decode_frame(data)
        if frame.method == DATA and frame.header("type") == "event":
            return str(frame.header("message_id")), json.loads(frame.payload)
        return None

    async def answer(self, connection: Connection, data: str | bytes) -> None:
        assert isinstance(data, bytes)
        frame = decode_frame(data)
        if frame.method == CONTROL and frame.header("type") == "ping":
            pong = LarkFrame(method=CONTROL, service=frame.service, headers=[("type", "pong")])
            await connection.socket.send_bytes(encode_frame(pong))

    def push(self, event: dict[str, Any], *, delivery: str = "") -> str:
        """Send an event frame; its frame message id (the ack carries it back)."""
        delivery = delivery or f"msg-{uuid.uuid4().hex[:12]}"
        seq = next(self._seq)
        headers = [("type", "event"), ("message_id", delivery), ("trace_id", f"trace-{seq}"), ("sum", "1"),
                   ("seq", "0")]  # fmt: skip
        frame = LarkFrame(seq_id=seq, log_id=seq, headers=headers, payload=json.dumps(event).encode())
        self.send(encode_frame(frame))
        return delivery

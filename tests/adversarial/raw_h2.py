"""A raw HTTP/2 gRPC client that never grants flow-control window (the ``h2`` library).

It speaks just enough gRPC to start unary-request, server-streaming calls: the connection
preface, SETTINGS with an initial stream window of 0, one HEADERS + DATA per call. It
answers PINGs and SETTINGS (the ``h2`` state machine acknowledges them) so keepalive sees
a live peer, but it never sends a WINDOW_UPDATE: the server can write no message of any
of its calls. A test tool: bounded in time by its caller (``pump`` with a deadline).
"""

from __future__ import annotations

import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.settings


class ZeroWindowClient:
    """One connection to ``host:port`` whose stream windows stay 0 (module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.settimeout(0.05)
        self.authority = f"{host}:{port}"
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        )
        self.conn.initiate_connection()
        self.ended: dict[int, str] = {}
        self.pings = 0
        self._flush()

    def start(self, path: str, message: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> int:
        """Start a call of ``path`` (``/package.Service/method``) with one request ``message``."""
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *metadata,
        ]
        self.conn.send_headers(sid, headers)
        self.conn.send_data(sid, struct.pack(">?I", False, len(message)) + message, end_stream=True)
        self._flush()
        return sid

    def pump(self, seconds: float) -> None:
        """Read and answer frames for ``seconds`` (never granting window)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.PingReceived):
                    self.pings += 1
                elif isinstance(event, h2.events.StreamReset):
                    self.ended[event.stream_id] = f"reset {event.error_code}"
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.setdefault(event.stream_id, "ended")
            self._flush()

    def _flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

"""A free TCP port to hand to a server started next."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just gave out on `host` and took back. Another process may grab
    it before the server binds it; that race is accepted here (tests, local services), and a
    server that fails to bind says so in its log."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])

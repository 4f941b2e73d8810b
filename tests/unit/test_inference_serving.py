"""The port file a server announces its port in is written atomically: whole or not at all."""

import errno
import os

import pytest
from swefleet.inference.serving import write_atomic

pytestmark = pytest.mark.unit


def test_port_file_holds_the_port_and_no_temp_file_is_left(tmp_path):
    write_atomic(tmp_path / "port", "8000")
    write_atomic(tmp_path / "port", "41234")
    assert (tmp_path / "port").read_text() == "41234"
    assert [p.name for p in tmp_path.iterdir()] == ["port"]


def test_a_failed_write_raises_and_keeps_the_old_port_file(tmp_path, monkeypatch):
    write_atomic(tmp_path / "port", "8000")

    def broken(fd):
        raise OSError(errno.ENOSPC, "no space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="no space left"):
        write_atomic(tmp_path / "port", "41234")
    monkeypatch.undo()
    assert (tmp_path / "port").read_text() == "8000"
    assert [p.name for p in tmp_path.iterdir()] == ["port"]


def test_accepted_connections_have_nagle_off():
    """A kept-alive answer written in two sends must not wait for the peer's delayed ACK."""
    import asyncio
    import socket

    from swefleet.inference.serving import bind_socket

    async def accepted_nodelay() -> int:
        seen: list[int] = []

        def on_connect(reader, writer) -> None:
            sock = writer.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=bind_socket("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()
        return seen[0]

    assert asyncio.run(accepted_nodelay()) != 0

"""A TLS listener's connection (workers/tls_connection.py) on a real socket pair: the
handshake, requests and answers through the SSLObject, a FileSlice sent by preadv
through TLS (no sendfile), the client certificate's DN mapped to the principal, and a
plaintext client refused."""
import asyncio
import socket
import ssl
import struct


from mpbroker.protocol import framing
from storage.slices import FileSlice
from tests.security.certs import KEY_PASSWORD
from workers.listener_security import ListenerSecurity
from workers.tls_connection import TLS_CHUNK, TlsConnection


def security(certs):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
           "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
           "ssl.truststore.location": certs.ca, "ssl.client.auth": "requested",
           "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L"}
    return ListenerSecurity.from_config(cfg, "SSL", "SSL")


class SliceDispatcher:
    """Answers every request with a header chunk and a FileSlice of `path`."""

    def __init__(self, path, size):
        self.path, self.size = path, size
        self.principals = []

    def dispatch(self, ctx, frame, pos):
        self.principals.append(ctx.principal)
        return [struct.pack(">i", self.size), FileSlice(self.path, 0, self.size)]


def request(cid):
    body = framing.encode_request_header(18, 0, cid, "c")
    return struct.pack(">i", len(body)) + body


async def serve_tls(certs, disp, client_cert=None, **open_kw):
    """A TlsConnection serving `disp` over a socket pair, its task, and a TLS client's
    (reader, writer) on the other end."""
    a, b = socket.socketpair()
    a.setblocking(False)
    conn = TlsConnection(a, disp, 1 << 20, security=security(certs))
    task = asyncio.ensure_future(conn.serve())
    ctx = ssl.create_default_context(cafile=certs.ca)
    if client_cert:
        ctx.load_cert_chain(certs.crt(client_cert), certs.key(client_cert))
    reader, writer = await asyncio.open_connection(sock=b, ssl=ctx,
                                                   server_hostname="127.0.0.1", **open_kw)
    return conn, task, reader, writer


def run(certs, tmp_path, client_cert, check):
    data = bytes(range(256)) * (3 * TLS_CHUNK // 256 + 7)   # several TLS chunks
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    disp = SliceDispatcher(str(path), len(data))

    async def main():
        conn, task, reader, writer = await serve_tls(certs, disp, client_cert)
        writer.write(request(1))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        got = await reader.readexactly(size)
        writer.close()
        await asyncio.wait_for(task, 5)
        check(got, data, conn, disp)
    asyncio.run(main())


def test_a_file_slice_goes_through_tls_and_the_certificate_names_the_principal(certs, tmp_path):
    def check(got, data, conn, disp):
        assert got == data
        assert disp.principals == ["User:alice"]
        assert conn.bytes_out > len(data)          # ciphertext: data plus TLS records
    run(certs, tmp_path, "alice", check)


def test_without_a_certificate_the_principal_is_anonymous(certs, tmp_path):
    run(certs, tmp_path, None, lambda got, data, conn, disp: disp.principals == ["User:ANONYMOUS"])


def test_a_plaintext_client_is_closed_after_a_failed_handshake(certs, caplog):
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        conn = TlsConnection(a, SliceDispatcher("x", 0), 1 << 20, security=security(certs))
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(1))
        await asyncio.wait_for(task, 5)
        assert conn.closed
        b.close()
    caplog.set_level("INFO", logger="workers.tls_connection")
    asyncio.run(main())
    assert "SSL handshake failed" in caplog.text


def test_small_and_large_slices_of_one_response_through_tls(certs, tmp_path):
    """Small slices are read into the response and written with its bytes as one (one
    flush); a large one still goes by preadv in TLS_CHUNK pieces."""
    from workers.connection import INLINE_SLICE_MAX
    sizes = [10, 3000, INLINE_SLICE_MAX + 5, 7]
    chunks, expect = [], b""
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i}.log"
        data = bytes([97 + i]) * size
        path.write_bytes(b"--" + data)
        chunks += [b"<%d>" % i, FileSlice(str(path), 2, size)]
        expect += b"<%d>" % i + data

    class Dispatcher:
        def dispatch(self, ctx, frame, pos):
            return [struct.pack(">i", len(expect)), *chunks]

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        conn = TlsConnection(a, Dispatcher(), 1 << 20, security=security(certs))
        task = asyncio.ensure_future(conn.serve())
        ctx = ssl.create_default_context(cafile=certs.ca)
        reader, writer = await asyncio.open_connection(sock=b, ssl=ctx, server_hostname="127.0.0.1")
        for cid in (1, 2):
            writer.write(request(cid))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            assert await reader.readexactly(size) == expect
        writer.close()
        await asyncio.wait_for(task, 5)
    asyncio.run(main())


def test_a_request_read_while_ciphertext_waits_for_the_socket_spoils_nothing(certs, tmp_path):
    """The client sends its next request while a large answer's ciphertext waits for
    the socket (`_out`): reading it must leave that ciphertext alone (the plain
    connection's batch of direct answers is another buffer), and both answers arrive
    whole."""
    data = bytes(range(256)) * (4 << 12)                    # 4 MiB
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    disp = SliceDispatcher(str(path), len(data))

    async def main():
        conn, task, reader, writer = await serve_tls(certs, disp, limit=1 << 16)
        writer.write(request(1))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not (conn._out is not None and len(conn._out)):   # the socket is full
            assert loop.time() < deadline
            await asyncio.sleep(0.005)
        writer.write(request(2))
        await writer.drain()
        await until_read(disp, 2)
        for _ in range(2):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            assert await reader.readexactly(size) == data
        writer.close()
        await asyncio.wait_for(task, 5)
    asyncio.run(main())


async def until_read(disp, n):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(disp.principals) < n:
        assert loop.time() < deadline
        await asyncio.sleep(0.005)

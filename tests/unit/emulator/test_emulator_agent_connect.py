"""An agent's connection attempts to a peer that does not listen yet keep one source port:
the fabric's controller places every new five-tuple, and each refused attempt would leave a
placed flow behind that counts as load (a stride run once placed 44 flows for 32 and lost a
fifth of its throughput to the misplacement)."""
import socket
import threading
import time

from emulator.agent.replay import connect_retrying


def test_retries_keep_one_source_port_until_the_peer_listens():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))  # bound, not listening: a connect is refused
    port = server.getsockname()[1]
    ports, got = [], {}
    t = threading.Thread(target=lambda: got.setdefault("s", connect_retrying(
        "127.0.0.1", port, time.time() + 30, 65536, ports)), daemon=True)
    t.start()
    deadline = time.time() + 20
    while len(ports) < 3 and time.time() < deadline:  # three refused attempts
        time.sleep(0.01)
    assert len(ports) >= 3
    server.listen(1)
    conn, (_, peer_port) = server.accept()
    t.join(10)
    assert got["s"] is not None and got["s"].getsockname()[1] == peer_port
    assert set(ports) == {peer_port}
    for s in (conn, got["s"], server):
        s.close()


def test_no_listener_until_the_deadline_gives_none():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    try:
        assert connect_retrying("127.0.0.1", server.getsockname()[1], time.time() + 0.3, 65536) is None
    finally:
        server.close()

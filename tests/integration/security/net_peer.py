#!/usr/bin/env python3
"""A network peer of gcrd --listen for the security tests (docs/protocol.md §14; Note [Proving the
token] in gcrd-net/net_handshake.h): a squatter on gcrd's port, a recording relay and a
replayer. The honest client is gcr itself (its handshake ends in TLS, Note [An encrypted channel]).

  net_peer.py squat PORT CAPTURE             takes one connection on PORT, answers its first line
                                             with a made-up challenge, keeps what it was sent
  net_peer.py record PORT TARGET CAPTURE     relays one connection from PORT to TARGET (a port on
                                             127.0.0.1), keeping what the client sent
  net_peer.py replay PORT CAPTURE            sends CAPTURE to PORT; prints what comes back
"""
import os
import select
import socket
import sys
import time

HOST = "127.0.0.1"


def read_line(s):
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def accept_one(port, capture):
    """One connection on PORT; CAPTURE.listening says when it listens."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, int(port)))
    listener.listen(1)
    open(capture + ".listening", "w").close()
    return listener.accept()[0]


def squat(port, capture):
    c = accept_one(port, capture)
    c.settimeout(10)
    got = b""
    try:
        while b"\n" not in got:
            chunk = c.recv(4096)
            if not chunk:
                break
            got += chunk
        # A challenge as a real server's looks, without the token to make its proof.
        c.sendall(("challenge nonce=%s proof=%s\n" % (os.urandom(32).hex(),
                                                      os.urandom(32).hex())).encode())
        while True:
            chunk = c.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    open(capture, "wb").write(got)


def record(port, target, capture):
    c = accept_one(port, capture)
    t = socket.create_connection((HOST, int(target)))
    sent = b""
    open_ends = {c: t, t: c}
    while open_ends:
        ready, _, _ = select.select(list(open_ends), [], [], 30)
        if not ready:
            break
        for s in ready:
            try:
                data = s.recv(65536)
            except ConnectionResetError:  # a TLS end that exits with the peer's bytes unread
                data = b""
            if not data:
                try:
                    open_ends[s].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                del open_ends[s]
                continue
            if s is c:
                sent += data
            try:
                open_ends[s].sendall(data)
            except OSError:
                pass
    open(capture, "wb").write(sent)


def replay(port, capture):
    s = socket.create_connection((HOST, int(port)), timeout=20)
    s.sendall(open(capture, "rb").read())
    got = b""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    print(got.decode(errors="replace").strip())


if __name__ == "__main__":
    {"squat": squat, "record": record, "replay": replay}[sys.argv[1]](*sys.argv[2:])

#!/usr/bin/env python3
"""Opens kernel resources a real program holds, then executes a command that inherits them.

    hold_resources.py KIND[,KIND...] [--unix-peer PATH] [--tcp-peer HOST:PORT] -- COMMAND ARGS...

KINDs: eventfd timerfd signalfd inotify epoll tcp-listen tcp-established (both ends held)
tcp-outside (to --tcp-peer) udp unix-pair unix-outside io_uring deleted-small deleted-large memfd. The fds stay open (inheritable) in
COMMAND, so a test can checkpoint a gcr-managed workload that holds them. Prints
"hold: KIND fd N" for each on stderr.
"""
import ctypes
import os
import socket
import sys
import tempfile

libc = ctypes.CDLL(None, use_errno=True)
keep = []  # objects whose fds must stay open until exec


def check(fd, what):
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return fd


def hold(kind, unix_peer, tcp_peer=None):
    if kind == "eventfd":
        return os.eventfd(7)
    if kind == "timerfd":
        return check(libc.timerfd_create(1, 0), "timerfd_create")  # CLOCK_MONOTONIC
    if kind == "signalfd":
        mask = ctypes.create_string_buffer(128)  # an empty sigset_t
        return check(libc.signalfd(-1, mask, 0), "signalfd")
    if kind == "inotify":
        fd = check(libc.inotify_init1(0), "inotify_init1")
        check(libc.inotify_add_watch(fd, tempfile.gettempdir().encode(), 0x100), "inotify_add_watch")
        return fd
    if kind == "epoll":
        return check(libc.epoll_create1(0), "epoll_create1")
    if kind == "memfd":
        fd = os.memfd_create("hold", 0)
        os.write(fd, b"memfd contents")
        return fd
    if kind == "tcp-listen":
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: rebinds after a restore
        s.bind(("127.0.0.1", 0))
        s.listen()
        keep.append(s)
        return s.fileno()
    if kind == "tcp-established":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        c = socket.create_connection(srv.getsockname())
        a, _ = srv.accept()
        keep.extend([srv, c, a])
        return c.fileno()
    if kind == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        keep.append(s)
        return s.fileno()
    if kind == "unix-pair":
        a, b = socket.socketpair()
        keep.extend([a, b])
        return a.fileno()
    if kind == "unix-outside":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(unix_peer)
        keep.append(s)
        return s.fileno()
    if kind == "tcp-outside":
        host, port = tcp_peer.rsplit(":", 1)
        c = socket.create_connection((host, int(port)))
        keep.append(c)
        return c.fileno()
    if kind == "io_uring":
        params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
        return check(libc.syscall(425, 4, params), "io_uring_setup")  # x86-64
    if kind in ("deleted-small", "deleted-large"):
        fd, path = tempfile.mkstemp(prefix="gcr-hold-", dir="/var/tmp")
        size = 4096 if kind == "deleted-small" else 80 << 20
        os.ftruncate(fd, size)
        os.write(fd, b"x")
        os.unlink(path)
        return fd
    raise SystemExit(f"hold_resources.py: unknown kind {kind}")


def main():
    args = sys.argv[1:]
    unix_peer = None
    if "--unix-peer" in args:
        i = args.index("--unix-peer")
        unix_peer = args[i + 1]
        del args[i:i + 2]
    tcp_peer = None
    if "--tcp-peer" in args:
        i = args.index("--tcp-peer")
        tcp_peer = args[i + 1]
        del args[i:i + 2]
    if len(args) < 3 or args[1] != "--":
        raise SystemExit(__doc__)
    for kind in args[0].split(","):
        fd = hold(kind, unix_peer, tcp_peer)
        os.set_inheritable(fd, True)
        print(f"hold: {kind} fd {fd}", file=sys.stderr, flush=True)
    for obj in keep:  # both ends of a pair, a listener: all of it goes to COMMAND
        os.set_inheritable(obj.fileno(), True)
    os.execvp(args[2], args[2:])


main()

"""A TCP proxy on 127.0.0.1 that a test can cut and restore: a network outage between two
real processes (a site router's uplink, SPEC 4.10) without killing either.

``cut()`` closes every connection through it and refuses new ones (accepted, then closed at
once) until ``restore()``. One thread, ``selectors``; ``close()`` stops it.
"""

from __future__ import annotations

import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.pairs: dict[socket.socket, socket.socket] = {}
        self.lock = threading.Lock()
        self.is_cut = False
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="tcpproxy")
        self.thread.start()

    def cut(self) -> None:
        with self.lock:
            self.is_cut = True
            for sock in list(self.pairs):
                self._drop(sock)

    def restore(self) -> None:
        with self.lock:
            self.is_cut = False

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        with self.lock:
            for sock in list(self.pairs):
                self._drop(sock)
        self.sel.close()
        self.listener.close()

    def _drop(self, sock: socket.socket) -> None:
        other = self.pairs.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self.pairs.pop(s, None)
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    def _run(self) -> None:
        while not self.stopping:
            for key, _ in self.sel.select(0.05):
                with self.lock:
                    if key.fileobj is self.listener:
                        self._accept()
                        continue
                    sock = key.fileobj
                    if sock not in self.pairs:
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(sock)
                        continue
                    try:
                        self.pairs[sock].sendall(data)
                    except OSError:
                        self._drop(sock)

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        if self.is_cut:
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=2)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(True)
            s.settimeout(5)
        self.pairs[client], self.pairs[upstream] = upstream, client
        self.sel.register(client, selectors.EVENT_READ, None)
        self.sel.register(upstream, selectors.EVENT_READ, None)

"""A cheap "is there another frame?" for the relay's hot path.

pyzmq 27's ``Socket.get(zmq.RCVMORE)`` builds a ``SocketOption`` enum on every call and costs
1 to 2 us, the largest single cost of relaying a three-frame message frame by frame
(docs/development/decisions.md#reading-frames-on-the-hot-path). :func:`rcvmore_reader`
returns a function that asks the very libzmq pyzmq has
loaded (found in ``/proc/self/maps``) through ``ctypes.PyDLL`` (no GIL release, the call never
blocks), about 0.4 us. It checks itself against ``Socket.get`` on the socket before use, and
falls back to ``Socket.get`` where the library cannot be found (another OS, a static build).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import Callable

import zmq

log = logging.getLogger(__name__)

_LIB: ctypes.PyDLL | None | bool = None


def _loaded_libzmq() -> ctypes.PyDLL | None:
    """The libzmq shared object mapped into this process (pyzmq's), or None."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "libzmq" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.PyDLL(path)
            getsockopt = lib.zmq_getsockopt
        except (OSError, AttributeError):
            continue
        getsockopt.restype = ctypes.c_int
        getsockopt.argtypes = None
        return lib
    return None


def _library() -> ctypes.PyDLL | None:
    global _LIB
    if _LIB is None:
        _LIB = _loaded_libzmq() or False
    return _LIB or None


def rcvmore_reader(sock: zmq.Socket) -> Callable[[], int]:
    """A function of no arguments returning ``sock``'s RCVMORE (1 or 0)."""
    fallback = functools.partial(sock.get, zmq.RCVMORE)
    lib = _library()
    if lib is None:
        log.debug("libzmq not found in the process map: RCVMORE through pyzmq")
        return fallback
    getsockopt = lib.zmq_getsockopt
    value, size = ctypes.c_int(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
    handle, option = ctypes.c_void_p(sock.underlying), ctypes.c_int(zmq.RCVMORE)
    pvalue, psize = ctypes.byref(value), ctypes.byref(size)

    def rcvmore() -> int:
        if getsockopt(handle, option, pvalue, psize):
            raise zmq.ZMQError()
        return value.value

    try:
        same = rcvmore() == fallback()
    except zmq.ZMQError:
        same = False
    if not same:
        log.warning("RCVMORE through ctypes disagrees with pyzmq: using pyzmq")
        return fallback
    return rcvmore

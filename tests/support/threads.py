"""Work run at once in threads, with any exception re-raised in the test's own thread."""

from __future__ import annotations

import threading


def in_threads(*work, timeout: float = 60) -> None:
    """Run each callable of ``work`` in its own thread at once; wait for all (at most
    ``timeout`` seconds each), then raise the first exception any of them raised."""
    errors: list[BaseException] = []

    def guarded(fn):
        try:
            fn()
        except BaseException as e:      # re-raised below, in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(fn,)) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]

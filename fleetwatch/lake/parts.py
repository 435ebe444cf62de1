"""The parts of the landing files a replay reads (:mod:`fleetwatch.lake.follow`), streamed a line
at a time instead of held: the *window* of a point is the files that may hold lines landed at
or after it (:meth:`fleetwatch.lake.landed.Files.to_read`), each as long as it is when the
replay starts, or, for the files the seam's reader followed, as far as that reader read (what
came after is the live tail's). Each sink writes its files one after the other and its lines
in the order they landed (a batch with one ``received``, sorted by ``ts`` and msg_id here),
so :func:`stream` reads each sink's files in turn and merges the sinks. :func:`resends` finds
the resent messages of a window, whose first copies the replay looks up (a file may have been
closed or moved to ``done/`` since it was listed: it is found again by its inode).
"""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import dataclass

from fleetwatch.lake.landed import Event, Files, Reader, ends, file_name, order, parse, resent
from sinks.history.landing import OPEN_SUFFIX


@dataclass(frozen=True)
class Part:
    """A landing file as far as a replay reads it: ``size`` bytes of the file ``inode``."""

    path: str
    inode: tuple[int, int]
    size: int


def window(files: Files, at: float, followed: Reader | None = None,
           followed_at: float = math.inf) -> list[Part]:
    """The files that may hold lines landed at or after ``at``, as they are now. A file
    ``followed`` read (its files: those that may hold lines at or after ``followed_at``) is
    cut where it read up to, and one it would read but never saw is left out: what the
    window holds is what ``followed`` saw, and what came since is the live tail's."""
    present = files.present()
    end = ends(present)
    parts, seen = [], set()
    for name, path in sorted(present.items()):
        if end[name] < at:
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:       # moved meanwhile: listed again under its new name
            continue
        inode = (st.st_dev, st.st_ino)
        if inode in seen:
            continue
        seen.add(inode)
        size = st.st_size
        if followed is not None and inode in followed.offsets:
            size = followed.offsets[inode]
        elif followed is not None and end[name] >= followed_at:
            size = 0
        parts.append(Part(path, inode, size))
    return parts


def _open(files: Files, part: Part):
    """``part``'s file, wherever it went since (closed, moved to done/); None if deleted."""
    for _ in range(2):              # a move between the listing and the open: once more
        for path in [part.path] + sorted(files.present().values()):
            try:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == part.inode:
                    return open(path, "rb")
            except FileNotFoundError:
                continue
    return None


def resends(files: Files, parts: list[Part]) -> set[str]:
    """The msg_ids of the resent messages (``dup``, ``retry``) in ``parts``."""
    ids: set[str] = set()
    for part in parts:
        f = _open(files, part)
        if f is None:
            continue
        with f:
            data = f.read(part.size)
        if b'"dup"' not in data and b'"retry"' not in data:
            continue
        for line in data.split(b"\n"):
            if b'"dup"' in line or b'"retry"' in line:
                event = parse(line)
                if event is not None and resent(event):
                    ids.add(event.msg_id)
    return ids


def stream(files: Files, parts: list[Part], bad: list[int]):
    """The events of ``parts`` in the lake's order, a line at a time: each sink's files one
    after the other, the sinks merged (``bad[0]`` counts the lines skipped)."""
    by_sink: dict[str, list[tuple]] = {}
    for part in parts:
        name = os.path.basename(part.path)
        parsed = file_name(name[:-len(OPEN_SUFFIX)] if name.endswith(OPEN_SUFFIX) else name)
        key = parsed.sink if parsed is not None else name
        by_sink.setdefault(key, []).append((parsed.start if parsed else 0.0, name, part))

    def of_sink(entries):
        for _, _, part in sorted(entries):
            yield from _events(files, part, bad)
    return heapq.merge(*(of_sink(e) for e in by_sink.values()), key=order)


def _events(files: Files, part: Part, bad: list[int]):
    f = _open(files, part)
    if f is None:
        return
    with f:
        batch: list[Event] = []
        left = part.size
        for raw in f:
            left -= len(raw)
            if left < 0 or not raw.endswith(b"\n"):
                break
            event = parse(raw[:-1])
            if event is None:
                bad[0] += 1
                continue
            if batch and event.received != batch[0].received:    # a batch of the sink
                yield from sorted(batch, key=order)
                batch = []
            batch.append(event)
        yield from sorted(batch, key=order)

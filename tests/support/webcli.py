"""``fleetwatch web user|token`` for the console's tests, run in the test's process
(:meth:`support.fleet.Fleet.command`) with a standard input of its own: as a process each
costs about 0.8 core-seconds, most of it Python and the console's modules starting. A
claim about the process itself (its exit status, that it never serves) uses
:meth:`~support.fleet.Fleet.cli`."""

from __future__ import annotations

import io
import subprocess
import sys
from unittest import mock


def web(fleet, *args: str, input: str = "", check: bool = True) -> subprocess.CompletedProcess:
    """``fleetwatch web ARGS`` in this process, reading ``input`` as its standard input (not
    a terminal): what ``fleet.cli("web", ...)`` gives."""
    with mock.patch.object(sys, "stdin", io.StringIO(input)):
        return fleet.command("web", *args, check=check)

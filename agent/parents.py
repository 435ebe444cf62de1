"""The ``parents`` an agent declares for itself (its config) or for a device it polls
(``devices.hosts[].parents``): each ``HOST`` or ``HOST/CHECK``, as HELLO and REGISTER carry
them (SPEC.md 4.1)."""

from __future__ import annotations

import re

#: HOST or HOST/CHECK: no empty part, no spaces at either end of a part, 512 characters at most
PARENT = re.compile(r"^(?=.{1,512}$)[^/\s](?:[^/]*[^/\s])?(?:/[^/\s](?:[^/]*[^/\s])?)?$")
#: parents one host may declare
MAX_PARENTS = 64


def check_parents(parents) -> None:
    """ValueError (its text after ``parents: ``) when ``parents`` are too many or one is not
    HOST or HOST/CHECK."""
    if len(parents) > MAX_PARENTS:
        raise ValueError(f"parents: expected at most {MAX_PARENTS}")
    for parent in parents:
        if not PARENT.match(parent):
            raise ValueError(f"parents: {parent[:60]!r} is not HOST or HOST/CHECK")

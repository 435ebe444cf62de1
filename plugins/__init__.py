"""Nagios-style plugin helpers (ranges, perfdata, output parsing) and the bundled checks in bin/.

Stdlib only, and nothing imported here: the bundled checks import ``plugins.nagios`` with the
host's own ``python3``, outside fleetwatch's virtualenv.
"""

import os


def bundled_dir() -> str:
    """Absolute path of the bundled checks (``plugins/bin``, shipped as package data): the
    first of the agent's default plugin directories."""
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "bin")

"""fleetwatch: a monitoring agent and router fleet on ZeroMQ."""

#: the one source of the version (setup.cfg reads it; CHANGELOG.md's newest release names it:
#: tests/unit/test_changelog.py); semantic versions, docs/operating/upgrading.md
__version__ = "1.0.0"

"""fleetwatch: a monitoring agent and router fleet on ZeroMQ."""

__version__ = "0.1.0"

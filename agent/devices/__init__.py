"""Devices without an agent (switches, routers, printers, UPSes, appliances, services seen
from outside), polled by an agent whose config declares them: its poller.

Each device is a host of the fleet, spoken for by the poller (docs/operating/devices.md).
Imported only by an agent whose config has ``devices``: nothing else of the agent imports
pysnmp.
"""

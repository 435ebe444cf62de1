"""Nagios-style plugin helpers (ranges, perfdata, output parsing) and the bundled checks in bin/."""

"""The webhook's receiver: PagerDuty's Events API v2 (the demo's ``webhook`` channel)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetwatch.cli.demo.receivers.base import Service


class Pager(Service):
    """The webhook receiver: PagerDuty's Events API v2 answers, each POST kept."""

    name = "pager"

    def __init__(self, directory: Path | None, port: int):
        super().__init__(port, directory)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        if raw is None:
            return 413, {"status": "invalid event", "message": "too large"}
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"status": "invalid event", "message": "Event object is invalid",
                         "errors": ["not JSON"]}
        self.keep({"path": path, "body": body})
        key = body.get("dedup_key") if isinstance(body, dict) else None
        return 202, {"status": "success", "message": "Event processed",
                     **({"dedup_key": key} if isinstance(key, str) else {})}

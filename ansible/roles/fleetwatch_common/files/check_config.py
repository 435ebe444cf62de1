"""Check a fleetwatch config file the way the process will read it (Ansible `validate`).

    check_config.py KIND PATH      KIND: agent, router, sink, scheduler, operator

Exit 0 when the file loads; else one line naming the key and what was expected, exit 78.
"""

import importlib
import os
import sys

CLASSES = {
    "agent": ("agent.config", "AgentConfig"),
    "router": ("router.config", "RouterConfig"),
    "sink": ("sinks.config", "SinkConfig"),
    "scheduler": ("scheduler.config", "SchedulerConfig"),
    "operator": ("fleetwatch.cli.operator", "OperatorConfig"),
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in CLASSES:
        print(f"usage: check_config.py {{{'|'.join(CLASSES)}}} PATH", file=sys.stderr)
        return 2
    from fleetwatch.config import ConfigError, load
    module, name = CLASSES[argv[0]]
    try:
        load(getattr(importlib.import_module(module), name), argv[1])
    except ConfigError as e:
        print(f"{argv[0]} config: {e}", file=sys.stderr)
        return os.EX_CONFIG
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Parse what a Nagios-style plugin prints (Monitoring Plugins guidelines, "Plugin Output").

    TEXT | PERFDATA
    LONG TEXT LINE 1
    LONG TEXT LINE 2 | PERFDATA
    PERFDATA
    ...

The first line is the status text, optionally followed by ``|`` and performance data. The
lines after it are long output until one holds a ``|``: what follows that ``|`` and every
later line are more performance data. A perfdata token is
``'label'=value[UOM];[warn];[crit];[min];[max]``; a label holding spaces is quoted and a
quote inside it is written twice (``'it''s'``); ``value`` may be ``U`` (undetermined).

Plugins are other people's programs: nothing here raises on their output. Bytes that are
not UTF-8 are replaced, a token that does not parse is counted in ``bad_perfdata`` and
skipped, and every part is capped so that a plugin printing megabytes costs little time and
cannot make a RESULT too large to send. Stdlib only: the agent imports this.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from plugins.nagios import format_number, quote_label

#: Bytes of plugin output looked at; the rest is ignored.
MAX_INPUT = 1024 * 1024
#: Characters kept of the status text and of the long output.
MAX_TEXT = 4096
MAX_LONG = 65536
#: Perfdata entries kept; later ones are counted in ``bad_perfdata``.
MAX_PERFDATA = 256
MAX_LABEL = 200
MAX_THRESHOLD = 64
TRUNCATED = " [truncated]"

_SPACE = re.compile(r"\s*")
_GARBAGE = re.compile(r"\S+")
# 'quoted label' ('' inside is one quote) or a bare label, '=', the rest up to a space.
_TOKEN = re.compile(r"(?:'((?:[^']|'')*)'|([^\s'=]+))=(\S*)")
_NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)([^\d\s;]{0,16})")


@dataclass(frozen=True)
class PluginOutput:
    """A plugin's output, parsed: ``perfdata`` items follow SPEC.md's RESULT.perfdata."""

    text: str = ""
    long_output: str = ""
    perfdata: list = field(default_factory=list)
    bad_perfdata: int = 0


def parse(data: bytes, max_input: int = MAX_INPUT) -> PluginOutput:
    """Split a plugin's stdout into status text, long output and performance data."""
    text = bytes(data[:max_input]).decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.rstrip("\r") for line in lines]
    if not lines:
        return PluginOutput()
    first, _, perf = lines[0].partition("|")
    perf_parts = [perf]
    long_lines: list[str] = []
    for i, line in enumerate(lines[1:], start=1):
        before, bar, after = line.partition("|")
        if bar:
            long_lines.append(before.rstrip())
            perf_parts.append(after)
            perf_parts.extend(lines[i + 1:])
            break
        long_lines.append(line)
    while long_lines and not long_lines[-1].strip():
        long_lines.pop()
    perfdata, bad = parse_perfdata(" ".join(perf_parts))
    return PluginOutput(_cap(first.strip(), MAX_TEXT), _cap("\n".join(long_lines), MAX_LONG),
                        perfdata, bad)


def parse_perfdata(text: str, limit: int = MAX_PERFDATA) -> tuple[list[dict], int]:
    """(the perfdata items, how many tokens were malformed or past ``limit``)."""
    items: list[dict] = []
    bad = 0
    pos, end = 0, len(text)
    while True:
        pos = _SPACE.match(text, pos).end()
        if pos >= end:
            return items, bad
        if len(items) >= limit:
            return items, bad + len(text[pos:].split())
        m = _TOKEN.match(text, pos)
        if m is None:
            bad += 1
            pos = _GARBAGE.match(text, pos).end()
            continue
        pos = m.end()
        label = m.group(1).replace("''", "'") if m.group(1) is not None else m.group(2)
        item = _item(label, m.group(3))
        if item is None:
            bad += 1
        else:
            items.append(item)


def _item(label: str, spec: str) -> dict | None:
    if not label or len(label) > MAX_LABEL:
        return None
    fields = spec.split(";")
    if any(fields[5:]):
        return None
    fields += [""] * (5 - len(fields))
    raw, warn, crit, low, high = fields[:5]
    if raw == "U":
        value, uom = None, ""
    else:
        parsed = _number(raw)
        if parsed is None:
            return None
        value, uom = parsed
    bounds = []
    for bound in (low, high):
        if bound in ("", "U"):
            bounds.append(None)
            continue
        parsed = _number(bound)
        if parsed is None:
            return None
        bounds.append(parsed[0])
    if len(warn) > MAX_THRESHOLD or len(crit) > MAX_THRESHOLD:
        return None
    return {"label": label, "value": value, "uom": uom, "warn": warn or None,
            "crit": crit or None, "min": bounds[0], "max": bounds[1]}


def _number(text: str) -> tuple[float, str] | None:
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    value = float(m.group(1))
    if not math.isfinite(value):
        return None
    return value, m.group(2)


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit - len(TRUNCATED)] + TRUNCATED


# ---------------------------------------------------------------- wire perfdata as text

def _perf_number(value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ""
    try:
        return format_number(value)
    except ValueError:          # not finite: what the wire said, as Python prints it
        return repr(float(value))


def _perf_label(label: str) -> str:
    try:
        return quote_label(label)
    except ValueError:          # empty or control characters: shown quoted, escaped
        return "'" + label.encode("unicode_escape").decode("ascii").replace("'", "''") + "'"


def perfdata_text(perfdata) -> str:
    """Wire perfdata (a list of objects, SPEC 4) as plugins write it:
    ``'label'=value[uom];[warn];[crit];[min];[max]``, space separated, empty tails cut."""
    items = []
    for item in perfdata if isinstance(perfdata, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("label"), str):
            continue
        value = item.get("value")
        uom = item.get("uom") if isinstance(item.get("uom"), str) else ""
        head = f"{_perf_label(item['label'])}={'U' if value is None else _perf_number(value)}{uom}"
        tail = [item.get(k) if isinstance(item.get(k), str) else "" for k in ("warn", "crit")]
        tail += [_perf_number(item.get(k)) for k in ("min", "max")]
        items.append(";".join([head, *tail]).rstrip(";"))
    return " ".join(items)


def plugin_text(output: str, long_output: str = "", perfdata=None) -> str:
    """A result as the plugin printed it: ``TEXT | perfdata`` then the long output."""
    perf = perfdata_text(perfdata)
    lines = [f"{output} | {perf}" if perf else output]
    if long_output:
        lines.append(long_output.rstrip("\n"))
    return "\n".join(lines)

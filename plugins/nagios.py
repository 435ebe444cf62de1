"""Helpers for writing Nagios-style plugins: threshold ranges, perfdata, and a small Check.

Follows the Monitoring Plugins development guidelines
(https://www.monitoring-plugins.org/doc/guidelines.html): exit codes 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN; first output line ``SERVICE STATUS - text | perfdata``; long output
after it; ``-w``/``-c`` thresholds in the range syntax ``10``, ``10:``, ``~:10``, ``10:20``,
``@10:20``. Usage errors, timeouts and crashes are UNKNOWN with a one-line reason.

Stdlib only, and nothing newer than Python 3.9: the bundled checks in ``bin/`` import this
module with whatever ``python3`` the host has, outside fleetwatch's virtualenv. Parsing plugin
output is not here: that is ``plugins.output``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from enum import IntEnum

__all__ = ["Status", "worst", "Range", "Thresholds", "Perf", "format_number", "quote_label",
           "range_type", "Check", "UsageError", "CheckTimeout"]


class Status(IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


# CRITICAL > WARNING > UNKNOWN > OK, as the Monitoring Plugins' max_state_alt(): a failed
# sub-check must not hide a real problem found by another, nor pass for OK.
_SEVERITY = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARNING: 2, Status.CRITICAL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe of ``statuses`` (OK when there are none)."""
    return max((Status(s) for s in statuses), key=_SEVERITY.__getitem__, default=Status.OK)


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)\Z")


def _bound(text: str, whole: str) -> float:
    if not _NUMBER.match(text):
        raise ValueError(f"bad range {whole!r}: {text!r} is not a number")
    return float(text)


class Range:
    """A threshold range; ``alert(value)`` is true when the value is outside it (or inside it
    with ``@``). Bounds are inclusive: ``10`` alerts above 10, not at 10."""

    __slots__ = ("start", "end", "inside", "_text")

    def __init__(self, start: float = 0.0, end: float = math.inf, inside: bool = False,
                 text: str | None = None):
        if start > end:
            raise ValueError(f"bad range: start {start} is greater than end {end}")
        self.start, self.end, self.inside, self._text = float(start), float(end), inside, text

    @classmethod
    def parse(cls, text: str | float) -> Range:
        """``Range`` from the guidelines' syntax; ValueError naming the problem otherwise."""
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = format_number(text)
        if not isinstance(text, str):
            raise ValueError(f"bad range {text!r}: expected a string")
        whole = text.strip()
        inside = whole.startswith("@")
        body = whole[1:] if inside else whole
        if not body:
            raise ValueError(f"bad range {text!r}: empty")
        if ":" in body:
            lo, hi = body.split(":", 1)
            start = -math.inf if lo == "~" else 0.0 if lo == "" else _bound(lo, whole)
            end = math.inf if hi == "" else _bound(hi, whole)
        else:
            start, end = 0.0, _bound(body, whole)
        if start > end:
            raise ValueError(f"bad range {text!r}: start {format_number(start)} is greater "
                             f"than end {format_number(end)}")
        return cls(start, end, inside, whole)

    def alert(self, value: float) -> bool:
        within = self.start <= value <= self.end
        return within if self.inside else not within

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        at = "@" if self.inside else ""
        if self.end == math.inf:
            return at + ("~" if self.start == -math.inf else format_number(self.start)) + ":"
        if self.start == 0:
            return at + format_number(self.end)
        lo = "~" if self.start == -math.inf else format_number(self.start)
        return f"{at}{lo}:{format_number(self.end)}"

    def __repr__(self) -> str:
        return f"Range.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Range):
            return NotImplemented
        return (self.start, self.end, self.inside) == (other.start, other.end, other.inside)

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.inside))


RangeLike = "Range | str | float | None"  # what a threshold may be given as (annotations)


def _as_range(value: RangeLike) -> Range | None:
    if value is None or isinstance(value, Range):
        return value
    if isinstance(value, str) and not value.strip():
        return None
    return Range.parse(value)


class Thresholds:
    """A warning and a critical range (either may be absent) giving the status of a value."""

    __slots__ = ("warning", "critical")

    def __init__(self, warning: RangeLike = None, critical: RangeLike = None):
        self.warning, self.critical = _as_range(warning), _as_range(critical)

    def status(self, value: float) -> Status:
        if self.critical is not None and self.critical.alert(value):
            return Status.CRITICAL
        if self.warning is not None and self.warning.alert(value):
            return Status.WARNING
        return Status.OK

    @classmethod
    def parse_list(cls, warning: str | None, critical: str | None,
                   count: int) -> list[Thresholds]:
        """``count`` Thresholds from comma lists such as check_load's ``-w 4,3,2``; a single
        range applies to every value, an empty item means no threshold for that value."""
        warns = _split(warning, count, "-w/--warning")
        crits = _split(critical, count, "-c/--critical")
        return [cls(w, c) for w, c in zip(warns, crits)]

    def __repr__(self) -> str:
        return f"Thresholds({self.warning!r}, {self.critical!r})"


def _split(text: str | None, count: int, option: str) -> list[Range | None]:
    if text is None:
        return [None] * count
    items = text.split(",")
    if len(items) == 1:
        items = items * count
    elif len(items) != count:
        expected = "one range" if count == 1 else f"1 or {count} comma-separated ranges"
        raise ValueError(f"{option}: expected {expected}, got {len(items)} in {text!r}")
    try:
        return [_as_range(item) for item in items]
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None


def format_number(x: float) -> str:
    """A perfdata number: no exponent, no needless decimals (``5``, ``0.25``, ``0.000123``)."""
    if isinstance(x, int):
        return str(int(x))
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x}")
    if x.is_integer():
        return str(int(x))
    digits = 6 if abs(x) >= 1 else min(15, 5 - math.floor(math.log10(abs(x))))
    text = f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NEEDS_QUOTES = re.compile(r"[\s=';|]")
_BAD_UOM = re.compile(r"[\d\s;=|'.,+\-]")


def quote_label(label: str) -> str:
    """The label as perfdata writes it: quoted (``''`` for a quote) when it has to be."""
    if not label or _CONTROL.search(label):
        raise ValueError(f"bad perfdata label {label!r}: empty or control characters")
    if _NEEDS_QUOTES.search(label):
        return "'" + label.replace("'", "''") + "'"
    return label


def _threshold_text(value: RangeLike) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    if isinstance(value, str):
        Range.parse(value)
        return value.strip()
    return str(value) if isinstance(value, Range) else format_number(value)


class Perf:
    """One perfdata item; ``str()`` gives ``'label'=value[UOM];[warn];[crit];[min];[max]``
    with trailing empty fields trimmed. A value of None (or NaN) is written ``U``.
    ValueError at construction for what cannot be written."""

    __slots__ = ("label", "value", "uom", "warn", "crit", "min", "max")

    def __init__(self, label: str, value: float | None, uom: str = "",
                 warn: RangeLike = None, crit: RangeLike = None,
                 min: float | None = None, max: float | None = None):
        self.label, self.value, self.uom = label, value, uom
        self.warn, self.crit, self.min, self.max = warn, crit, min, max
        str(self)

    def __repr__(self) -> str:
        return f"Perf({str(self)!r})"

    def __str__(self) -> str:
        if _BAD_UOM.search(self.uom) or _CONTROL.search(self.uom):
            raise ValueError(f"bad perfdata unit {self.uom!r} for {self.label!r}")
        unknown = self.value is None or (isinstance(self.value, float) and math.isnan(self.value))
        value = "U" if unknown else format_number(self.value) + self.uom
        fields = [_threshold_text(self.warn), _threshold_text(self.crit),
                  "" if self.min is None else format_number(self.min),
                  "" if self.max is None else format_number(self.max)]
        while fields and not fields[-1]:
            fields.pop()
        return ";".join([f"{quote_label(self.label)}={value}"] + fields)


def range_type(text: str) -> Range:
    """argparse ``type=`` for a range option, with the parser's message on bad syntax."""
    try:
        return Range.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


class UsageError(Exception):
    """Bad command line: the check ends UNKNOWN with this one-line message."""


class CheckTimeout(Exception):
    """Raised inside the check body when ``-t`` seconds have passed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        # --help and --version end UNKNOWN, as the Monitoring Plugins' own checks do.
        if message:
            sys.stderr.write(message)
        raise SystemExit(int(Status.UNKNOWN))


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit 3")

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            from fleetwatch import __version__ as version
        except Exception:  # the checks run outside fleetwatch's environment too
            version = "unknown"
        print(f"{parser.prog} (fleetwatch {version})")
        parser.exit()


class Check:
    """One plugin run: arguments, collected results and perfdata, and the exit.

    ``Check("LOAD", __doc__).run(body)`` parses ``-w``/``-c``/``-t``/``-v`` (plus whatever the
    plugin added to ``check.parser``), calls ``body(check, args)`` under the ``-t`` alarm and
    exits with the worst status ``body`` added; bad arguments, a timeout or any exception
    end UNKNOWN with one line instead of a traceback.
    """

    def __init__(self, service: str, description: str | None = None, *,
                 warning: str | None = None, critical: str | None = None,
                 values: int = 1, timeout: float = 10.0, threshold_help: str = "value",
                 prog: str | None = None):
        self.service = service.upper()
        self.values = values
        self.parser = _Parser(prog=prog or os.path.basename(sys.argv[0] or "check"),
                              description=description,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        # so that "-w -5:5" is a value, not an unknown option (Python >= 3.12 does this too)
        self.parser._negative_number_matcher = re.compile(r"^-\.?\d")
        many = f" (1 or {values} comma-separated ranges)" if values > 1 else ""
        self.parser.add_argument("-w", "--warning", metavar="RANGE", default=warning,
                                 help=f"warning range for the {threshold_help}{many}"
                                 + (f"; default {warning}" if warning else ""))
        self.parser.add_argument("-c", "--critical", metavar="RANGE", default=critical,
                                 help=f"critical range for the {threshold_help}{many}"
                                 + (f"; default {critical}" if critical else ""))
        self.parser.add_argument("-t", "--timeout", metavar="SECONDS", type=_positive_float,
                                 default=timeout, help=f"give up (UNKNOWN) after this long; "
                                 f"default {format_number(timeout)}")
        self.parser.add_argument("-v", "--verbose", action="count", default=0,
                                 help="more detail in the long output")
        self.parser.add_argument("-V", "--version", action=_Version)
        self.args: argparse.Namespace | None = None
        self.thresholds: list[Thresholds] = [Thresholds()] * values
        self.deadline: float | None = None
        self._results: list[tuple] = []
        self._long: list[str] = []
        self._perf: list[Perf] = []

    # ------------------------------------------------------------------ arguments
    def parse_args(self, argv: list[str] | None = None) -> argparse.Namespace:
        """Parse ``argv`` (sys.argv[1:] by default); UsageError on anything wrong."""
        args = self.parser.parse_args(argv)
        try:
            self.thresholds = Thresholds.parse_list(args.warning, args.critical, self.values)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.args = args
        return args

    @property
    def threshold(self) -> Thresholds:
        return self.thresholds[0]

    def remaining(self, margin: float = 0.0) -> float:
        """Seconds left before the ``-t`` alarm, less ``margin`` (for socket timeouts)."""
        if self.deadline is None:
            return math.inf
        return max(0.01, self.deadline - time.monotonic() - margin)

    # ------------------------------------------------------------------ results
    def add(self, status: Status, text: str) -> Status:
        """Record one finding; the first output line lists them, most severe first."""
        self._results.append((Status(status), text))
        return Status(status)

    def evaluate(self, value: float, text: str, index: int = 0) -> Status:
        """Add ``text`` with the status of ``value`` against threshold number ``index``."""
        return self.add(self.thresholds[index].status(value), text)

    def perf(self, label: str, value: float | None, uom: str = "", warn: RangeLike = None,
             crit: RangeLike = None, min: float | None = None,
             max: float | None = None) -> None:
        self._perf.append(Perf(label, value, uom, warn, crit, min, max))

    def long(self, line: str) -> None:
        self._long.extend(str(line).splitlines() or [""])

    @property
    def status(self) -> Status:
        return worst(s for s, _ in self._results) if self._results else Status.UNKNOWN

    def render(self) -> str:
        """The full output: first line, then the long output lines."""
        if self._results:
            ordered = sorted(self._results, key=lambda r: -_SEVERITY[r[0]])
            text = "; ".join(t for _, t in ordered if t) or "no details"
        else:
            text = "the check reported nothing"
        first = f"{self.service} {self.status.name} - {_one_line(text)}"
        if self._perf:
            first += " | " + " ".join(str(p) for p in self._perf)
        return "\n".join([first] + [_one_line(line) for line in self._long]) + "\n"

    def exit(self, status: Status | None = None, text: str | None = None):
        """Print the output and exit with the worst status (``status``/``text``, when given,
        are added first). Never returns."""
        if status is not None:
            self.add(status, text or "")
        data = self.render().encode("utf-8", "backslashreplace")
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        if out is not None:
            out.write(data)
            out.flush()
        else:
            sys.stdout.write(data.decode("utf-8"))
            sys.stdout.flush()
        raise SystemExit(int(self.status))

    def fail(self, text: str):
        """Exit UNKNOWN with only ``text``: the results so far are not trustworthy."""
        self._results, self._long, self._perf = [], [], []
        self.exit(Status.UNKNOWN, text)

    # ------------------------------------------------------------------ running
    def run(self, body: Callable[[Check, argparse.Namespace], None],
            argv: list[str] | None = None):
        """Parse arguments, run ``body(self, args)`` under the timeout, exit. Never returns."""
        try:
            args = self.parse_args(argv)
            with self._alarm(args.timeout):
                body(self, args)
        except UsageError as e:
            self.fail(f"bad arguments: {e} (see {self.parser.prog} --help)")
        except CheckTimeout as e:
            self.fail(f"timed out after {e} s")
        except KeyboardInterrupt:
            self.fail("interrupted")
        except Exception as e:
            self.fail(f"{type(e).__name__}: {e}")
        self.exit()

    @contextmanager
    def _alarm(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def fire(signum, frame):
            raise CheckTimeout(format_number(seconds))

        old_handler = signal.signal(signal.SIGALRM, fire)
        old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
        started = time.monotonic()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
            if old_delay:  # someone else's timer (pytest-timeout, in tests) keeps running
                left = max(0.001, old_delay - (time.monotonic() - started))
                signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def _one_line(text: str) -> str:
    """Output lines never break, and never carry a '|' the parser would take for perfdata."""
    return " ".join(str(text).splitlines()).replace("|", "\u00a6")

"""The webhook's templates (``template:`` of a ``webhook`` channel): Jinja2, sandboxed,
whose output is JSON.

A template is compiled when the config is loaded (:func:`compiled`: a syntax error, an
unknown filter, stops the sink at start naming ``channels.NAME.template`` and the line) and
rendered for each alert (:func:`rendered`, by :class:`sinks.alerting.delivery.services.webhook.
WebhookSender`, which gives it ``event``, ``message``, ``link`` and ``channel``); the output
is parsed as JSON and the parsed value is what is POSTed.

- **Sandboxed**: :class:`jinja2.sandbox.ImmutableSandboxedEnvironment`: no attribute that
  starts with ``_`` (``__class__``, ``__globals__``), no method that changes a value
  (``pop``, ``update``), no ``range`` past 100,000 items, and no ``*`` or ``**`` that
  would make a string or a list over :data:`OUTPUT_MAX` or a number past 10**100: a
  template reaches the alert's values and nothing of the process.
- **Strict**: an undefined name or key is an error (``StrictUndefined``), so a typo shows
  at the first alert instead of sending an empty field; ``event.get("parent")``,
  ``is defined`` or the :class:`sinks.alerting.delivery.message.Message` (whose fields
  are always there, None when empty) test for what an event may lack.
- **JSON-escaped**: every ``{{ ... }}`` is written as the inside of a JSON string (quotes,
  backslashes and control characters escaped; ``true``/``false``/``null`` for booleans and
  None), unless it went through ``tojson`` (then it is the JSON value, quotes included).
  Autoescaping (HTML) is off. So an agent's text, quotes, braces and newlines included,
  never ends a string or adds a key: ``"text": "{{ message.summary }}"`` and ``"text":
  {{ message.summary|tojson }}`` are both safe. Filters besides Jinja's: ``tojson``, and
  ``inert`` (mentions broken, :func:`sinks.alerting.delivery.services.plaintext.inert`).

An error when rendering (:class:`TemplateError`) names the template's problem and line,
never the alert's values; the sender makes it a permanent refusal: the same template
would fail again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator

from sinks.alerting.delivery.services.plaintext import inert

#: the longest output (a PagerDuty event is at most 512 KiB)
OUTPUT_MAX = 512 * 1024
#: the largest number ``**`` may make
NUMBER_MAX = 10 ** 100
#: the name of a template in Jinja's tracebacks (its lines are counted in it)
NAME = "<template>"


class TemplateError(ValueError):
    """A template that could not make a JSON payload; its message says why and where."""


class JSONText(str):
    """Text that is JSON already (``tojson``'s output), written as it is."""


def tojson(value) -> JSONText:
    """``value`` as JSON (UTF-8 kept; a :class:`Message` as its fields)."""
    return JSONText(json.dumps(value, ensure_ascii=False, default=_plain))


def _plain(value):
    from jinja2 import Undefined
    if isinstance(value, Undefined):
        str(value)                      # StrictUndefined: the UndefinedError naming it
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"tojson cannot write a {type(value).__name__}")


def _finalize(value) -> str:
    """What ``{{ value }}`` writes: JSON as it is, anything else as a JSON string's
    inside."""
    if isinstance(value, JSONText):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)[1:-1]


def _size(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


@functools.lru_cache(maxsize=1)
def environment():
    """The one sandbox every template is compiled in."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator_, left, right):
            if operator_ == "*":
                count = right if _size(left) else left if _size(right) else None
                if isinstance(count, int) and count * max(_size(left), _size(right)) > \
                        OUTPUT_MAX:
                    raise SecurityError(f"a repetition past {OUTPUT_MAX} items")
                return operator.mul(left, right)
            if isinstance(left, (int, float)) and isinstance(right, (int, float)) and \
                    abs(left) > 1 and right * len(str(int(abs(left)))) > 100:
                raise SecurityError("a power past 10**100")
            return operator.pow(left, right)

    env = Sandbox(autoescape=False, undefined=StrictUndefined, finalize=_finalize,
                  keep_trailing_newline=False)
    env.filters["tojson"] = tojson
    env.filters["inert"] = inert
    return env


@functools.lru_cache(maxsize=64)
def compiled(source: str):
    """The compiled template of ``source``; ValueError("template: line N: ...") for a
    syntax error or an unknown filter or test (the config's error), or without Jinja2."""
    try:
        from jinja2 import TemplateSyntaxError
    except ImportError:
        raise ValueError("template: needs Jinja2 (pip install 'fleetwatch[sinks]')") \
            from None
    try:
        return environment().from_string(source)
    except TemplateSyntaxError as e:
        raise ValueError(f"template: line {e.lineno}: {e.message}") from None


def _line(error: BaseException) -> int | None:
    """The template's line where ``error`` was raised (Jinja puts its frames in the
    traceback under the template's name)."""
    line, tb = None, error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == NAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def rendered(source: str, context: dict):
    """The JSON value the template ``source`` makes of ``context``; :class:`TemplateError`
    naming the problem (Jinja's own message for an undefined name or a refused attribute,
    the exception's kind otherwise: its text might quote the alert) and the line."""
    from jinja2 import TemplateError as JinjaError
    template = compiled(source)
    try:
        text = template.render(**context)
    except JinjaError as e:
        where = _line(e)
        raise TemplateError(f"{type(e).__name__}{f' at line {where}' if where else ''}: "
                            f"{str(e)[:200]}") from None
    except Exception as e:  # a filter or an operation failing on a value: its kind only
        where = _line(e)
        raise TemplateError(f"{type(e).__name__}{f' at line {where}' if where else ''} "
                            f"(an operation of the template failed on a value)") from None
    if len(text) > OUTPUT_MAX:
        raise TemplateError(f"its output is over {OUTPUT_MAX} characters")
    try:
        return json.loads(text)
    except ValueError as e:
        raise TemplateError(f"its output is not JSON: {getattr(e, 'msg', e)} at line "
                            f"{getattr(e, 'lineno', '?')} column {getattr(e, 'colno', '?')}"
                            ) from None

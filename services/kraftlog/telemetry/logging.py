"""Process logging set-up: level and format (text or JSON lines) for every kraftlog role.

Owns the root handler of a kraftlog process. Called once, first thing, by the role
commands (``run_controller`` in :mod:`kraftlog.tools.controller_commands`; broker and admin later)
with the ``--log-level`` / ``--log-format`` flags or the ``kraftlog.log.level`` /
``kraftlog.log.format`` configs. Must not be used by library code, which only calls
``logging.getLogger(__name__)``.

kraftlog's log lines carry their structured fields as ``key=value`` tokens
(``node=1 epoch=4 from=candidate to=leader reason='won election'``, STYLE.md rule 10).
The text format prints them as they are; the JSON format writes one object per line
with ``ts``, ``level``, ``logger``, ``message``, each ``key=value`` token as its own
field (numbers as numbers, quoted values unquoted), any ``extra=`` fields, the
exception if any, and the ``trace_id``/``span_id`` of the current span when tracing
is on, so a log line can be found from its trace and back.
"""

from __future__ import annotations

import ast
import datetime
import json
import logging
import re
import sys
from typing import Any, TextIO

from opentelemetry import trace

from kraftlog import config as kconfig
from kraftlog import errors

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_FIELD = re.compile(r"""(?<![\w.])([a-z_][a-z0-9_.]*)="""
                    r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s\]]+)""")
_INT = re.compile(r"-?\d+")
# Attributes every LogRecord has; anything else was passed with extra= and is a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}
_RESERVED = frozenset({"ts", "level", "logger", "message", "exception", "trace_id", "span_id"})


def parse_fields(message: str) -> dict[str, Any]:
    """The ``key=value`` tokens of a log message; ints as ints, quoted strings unquoted."""
    fields: dict[str, Any] = {}
    for key, raw in _FIELD.findall(message):
        value: Any = raw
        if raw[:1] in ("'", '"'):
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw[1:-1]
        elif _INT.fullmatch(raw):
            value = int(raw)
        fields[key] = value
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line; see the module docstring for the fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in parse_fields(message).items():
            if key not in _RESERVED:
                entry[key] = value
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in _RESERVED:
                entry[key] = value if isinstance(value, int | float | str | bool) or value is None \
                    else repr(value)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = trace.format_trace_id(span_context.trace_id)
            entry["span_id"] = trace.format_span_id(span_context.span_id)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=repr)


def configure(*, level: str = "INFO", log_format: str = "text",
              stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one writing to ``stream`` (stderr)."""
    level = level.upper()
    if level not in LEVELS:
        raise errors.ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    if log_format not in FORMATS:
        raise errors.ConfigError(f"log format {log_format!r} is not one of "
                                 f"{', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
    return handler


CONFIG_KEYS = (
    kconfig.ConfigKey(name="kraftlog.log.level", type=kconfig.ConfigType.STRING, default="INFO",
                      validator=kconfig.one_of(*LEVELS), doc="log level (--log-level wins)"),
    kconfig.ConfigKey(name="kraftlog.log.format", type=kconfig.ConfigType.STRING,
                      default="text", validator=kconfig.one_of(*FORMATS),
                      doc="log format: text, or json (one object per line; --log-format wins)"),
)
"""The logging keys every kraftlog process reads from its properties file."""

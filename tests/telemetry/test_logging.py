"""Log set-up: JSON lines carry the message's key=value fields, extras and the current trace;
text lines stay as written; bad levels and formats are refused."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from kraftlog import errors
from kraftlog.telemetry import logging as log_setup


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_the_structured_fields_and_the_current_trace() -> None:
    out = io.StringIO()
    log_setup.configure(level="INFO", log_format="json", stream=out)
    log = logging.getLogger("kraftlog.raft.driver")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("raft.election") as span:
        log.info("node=%s epoch=%s from=%s to=%s leader=%s reason=%r", 1, 4, "Candidate",
                 "Leader", 1, "won election with votes [1, 2]", extra={"cluster": "c1"})
    log.debug("not shown at INFO")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "INFO" and entry["logger"] == "kraftlog.raft.driver"
    assert entry["node"] == 1 and entry["epoch"] == 4 and entry["leader"] == 1
    assert entry["from"] == "Candidate" and entry["to"] == "Leader"
    assert entry["reason"] == "won election with votes [1, 2]"
    assert entry["cluster"] == "c1"
    assert entry["trace_id"] == trace.format_trace_id(span.get_span_context().trace_id)
    assert entry["ts"].endswith("+00:00")


def test_json_lines_keep_exceptions_and_never_let_a_field_replace_the_envelope() -> None:
    out = io.StringIO()
    log_setup.configure(level="DEBUG", log_format="json", stream=out)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("event=failed level=fake message=fake")
    entry = json.loads(out.getvalue())
    assert entry["level"] == "ERROR" and entry["event"] == "failed"
    assert entry["message"] == "event=failed level=fake message=fake"
    assert "ValueError: boom" in entry["exception"] and "trace_id" not in entry


def test_text_format_prints_the_line_as_written() -> None:
    out = io.StringIO()
    log_setup.configure(level="WARNING", log_format="text", stream=out)
    logging.getLogger("kraftlog.x").info("hidden")
    logging.getLogger("kraftlog.x").warning("event=unused_config key=%s", "a.b")
    assert out.getvalue().rstrip().endswith("WARNING kraftlog.x event=unused_config key=a.b")


@pytest.mark.parametrize(("level", "fmt"), [("TRACE", "text"), ("INFO", "xml")])
def test_unknown_levels_and_formats_are_refused(level: str, fmt: str) -> None:
    with pytest.raises(errors.ConfigError):
        log_setup.configure(level=level, log_format=fmt, stream=io.StringIO())

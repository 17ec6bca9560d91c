"""Tracing set-up follows the standard OTEL_* variables: off (no-op) unless an exporter or an
endpoint is configured; spans reach a real OTLP/gRPC receiver with kraftlog's resource
attributes, which the operator's variables override; the sampler variable is honoured."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from kraftlog import errors
from kraftlog.telemetry import tracing
from tests.telemetry.otlp_receiver import OtlpReceiver

OTEL_VARS = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
             "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
             "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("env", "exporters", "protocol"), [
    ({}, (), "grpc"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"}, ("otlp",), "grpc"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ("otlp",), "http/protobuf"),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4317"}, (),
     "grpc"),
    ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console"), "grpc"),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, (), "grpc"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
      "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, (), "http/protobuf"),
])
def test_settings_follow_the_otel_variables(env: dict[str, str], exporters: tuple[str, ...],
                                            protocol: str) -> None:
    settings = tracing.settings_from_env(env)
    assert settings.exporters == exporters and settings.protocol == protocol
    assert settings.enabled == bool(exporters)


@pytest.mark.parametrize("env", [{"OTEL_TRACES_EXPORTER": "zipkin"},
                                 {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}])
def test_unsupported_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(errors.ConfigError):
        tracing.settings_from_env(env)


def test_nothing_configured_means_a_no_op_tracer() -> None:
    off = tracing.setup_tracing(role="controller", node_id=1)
    assert not off.enabled and off.provider is None
    with off.tracer.start_as_current_span("x") as span:
        assert not span.is_recording()
        assert not trace.get_current_span().get_span_context().is_valid
    off.shutdown()


def test_resource_defaults_yield_to_the_operators_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = tracing.resource_for(role="broker", node_id=4).attributes
    assert defaults["service.name"] == "kraftlog-broker"
    assert defaults["service.instance.id"] == "broker-4" and defaults["kraftlog.node.id"] == 4
    assert defaults["kraftlog.process.role"] == "broker" and defaults["process.pid"] > 0
    monkeypatch.setenv("OTEL_SERVICE_NAME", "kafka-east")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-0,k8s.ns=prod")
    overridden = tracing.resource_for(role="broker", node_id=4).attributes
    assert overridden["service.name"] == "kafka-east"
    assert overridden["service.instance.id"] == "pod-0" and overridden["k8s.ns"] == "prod"
    assert overridden["kraftlog.node.id"] == 4


def test_spans_reach_a_real_otlp_grpc_receiver_on_shutdown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only shutdown flushes
        on = tracing.setup_tracing(role="broker", node_id=7, set_global=False)
        assert on.enabled
        with on.tracer.start_as_current_span("parent"), \
                on.tracer.start_as_current_span("child", attributes={"k": 1}):
            pass
        on.shutdown()
        spans = receiver.wait_for(lambda got: got if len(got) == 2 else None, timeout_s=5)
    by_name = {s.name: s for s in spans}
    assert by_name["child"].parent_span_id == by_name["parent"].span_id
    assert by_name["child"].attributes == {"k": 1}
    assert by_name["child"].resource["service.name"] == "kraftlog-broker"
    assert by_name["child"].instance == "broker-7"


def test_the_sampler_variable_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        sampled_out = tracing.setup_tracing(role="controller", node_id=1, set_global=False)
        with sampled_out.tracer.start_as_current_span("dropped") as span:
            assert not span.is_recording()
        sampled_out.shutdown()
        assert receiver.spans == []

"""Observability for every kraftlog process: traces (OTLP), Prometheus metrics, log setup.

Edge package: it may import OpenTelemetry, grpc and the clock. Pure cores never import
it; they emit plain events through injected hooks, and the drivers hand those here.
"""

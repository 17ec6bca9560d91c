"""Tests of kraftlog's telemetry."""

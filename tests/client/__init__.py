"""Tests of kraftlog's client."""

"""Tests of kraftlog's metadata."""

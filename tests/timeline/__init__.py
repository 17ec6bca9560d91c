"""Tests of kraftlog's timeline."""

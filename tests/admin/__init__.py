"""Tests of kraftlog's admin."""

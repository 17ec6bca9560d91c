"""Tests of kraftlog's storage."""

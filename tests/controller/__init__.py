"""Tests of kraftlog's controller."""

"""Tests of kraftlog's broker."""

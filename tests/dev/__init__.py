"""Tests of kraftlog dev, the local cluster launcher."""

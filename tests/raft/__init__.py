"""Tests of kraftlog's raft."""

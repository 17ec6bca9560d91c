"""Tests of the PySpark data source."""

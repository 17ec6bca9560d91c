"""Tests of the benchmarks in bench/, run at tiny sizes."""

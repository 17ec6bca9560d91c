"""Kafka-format storage: record batches, segmented logs, indexes, checkpoints, recovery.

Pure of I/O frameworks: files only, no asyncio, grpc or wall clock (callers pass
``now_ms``). Brokers and the raft log sit on top of it.
"""

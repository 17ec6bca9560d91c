"""kraftlog: Apache Kafka's KRaft architecture rebuilt in Python as gRPC microservices.

The package is one room per job (see the README's architecture section):
``storage`` (Kafka-format logs), ``raft`` (the KRaft quorum), ``timeline`` (MVCC
state), ``metadata`` (records, image, delta), ``controller``, ``broker``,
``admin``, ``pipeline`` (PySpark), ``telemetry`` and ``dev`` (local cluster).
Generated protobuf code lives in ``kraftlog.v1`` and is never edited by hand.
"""

__version__ = "0.1.0"

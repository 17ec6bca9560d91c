"""Generated protobuf and gRPC code for kraftlog's contracts (package ``kraftlog.v1``).

Owns nothing by hand but this file: every ``*_pb2.py``, ``*_pb2_grpc.py`` and
``.pyi`` stub here is made from ``protos/kraftlog/v1/*.proto`` by
``scripts/gen_protos.py`` and committed; ``tests/test_generated_code.py`` fails
when they are stale. Never edit them; change the ``.proto`` and regenerate.

Called by the edge modules only (gRPC servers, clients, drivers, converters):
``from kraftlog.v1 import raft_pb2, raft_pb2_grpc``. The pure cores (storage,
raft core, timeline, controller managers, partition logic) must not import this
package; they work on plain dataclasses that the edges translate to and from
these messages (tests/test_layering.py enforces it).
"""

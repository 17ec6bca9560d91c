"""Administration: the ``kraftlog`` tool commands that look at and change a running cluster.

Edge package (gRPC clients, argparse, file reading for offline tools). The quorum tools
(:mod:`.quorum_commands`, :mod:`.quorum_history`) live here; the AdminService joins later.
"""

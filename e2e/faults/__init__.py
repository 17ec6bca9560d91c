"""kraftlog's own Jepsen-style fault-injection suite.

Three controllers and three brokers, each a ``kraftlog controller|broker`` process in a
network namespace of its own on a private bridge; a client namespace running idempotent
acks=all producers of unique values and a reader; a seeded nemesis that kills, pauses,
cuts off (both ways and one way) and drops packets (nftables) while they run; after
healing, pure checks over the history and the files (no acknowledged record lost or
moved, no duplicates, reads stable, replicas and controllers' metadata logs byte-identical
below their high watermarks, one leader per epoch, ISRs whole again in time) and the
unavailability each fault caused.

Rooms: :mod:`.schedule` (the seeded plan, pure), :mod:`.evidence` (what a run records,
pure values), :mod:`.checks` (the verdicts, pure), :mod:`.selftest` (damaged evidence,
pure), :mod:`.netns` (namespaces and nftables), :mod:`.cluster` (node processes and
probes), :mod:`.workload` (producers and reader), :mod:`.driver` (one run inside the
client namespace), :mod:`.collect` (files into evidence), :mod:`.commands` (the CLI).
See e2e/faults/README.md.
"""

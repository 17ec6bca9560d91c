"""Administration: the AdminService and its client library.

Edge package (gRPC servers and clients); the ``kraftlog`` commands that use it are in
:mod:`kraftlog.tools`:

- :mod:`.admin_service` — the stateless AdminService (finds the active controller, the
  raft leader and the brokers; retries across their changes within each call's deadline);
- :mod:`.admin_client` — :class:`~.admin_client.AdminClient`, the typed asyncio client;
- :mod:`.reassign_plan`, :mod:`.reassign_throttles` — reassignment plans (pure) and
  their KIP-73 throttles;
- :mod:`.topic_health` — kafka-topics' partition health filters (pure);
- :mod:`.quorum_history` — the raft epochs of a metadata log (``kraftlog quorum history``).
"""

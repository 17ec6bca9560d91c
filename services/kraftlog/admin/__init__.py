"""Administration: the AdminService, its client library, and the ``kraftlog`` tool commands.

Edge package (gRPC servers and clients, argparse, file reading for offline tools):

- :mod:`.admin_service` — the stateless AdminService (finds the active controller, the
  raft leader and the brokers; retries across their changes within each call's deadline);
- :mod:`.server_commands` — ``kraftlog admin``, the process that serves it;
- :mod:`.admin_client` — :class:`~.admin_client.AdminClient`, the typed asyncio client;
- :mod:`.topic_commands` — ``kraftlog topics ...`` and ``kraftlog cluster describe``;
- :mod:`.topic_health` — kafka-topics' partition health filters (pure);
- :mod:`.quorum_commands`, :mod:`.quorum_history` — ``kraftlog quorum describe|history``.
"""

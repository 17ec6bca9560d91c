"""kraftlog's tests, a package so their shared helpers import by name: ``tests.quorum_cluster``
(controller and broker processes on loopback), ``tests.dev_cluster`` (``kraftlog dev up``),
``tests.proto_fuzz`` (hostile requests) and each room's own (``tests.broker.harness``,
``tests.raft.sim``, ...). pyproject's pytest ``pythonpath`` puts the repository root on
``sys.path`` so they resolve under ``--import-mode=importlib`` and a bare ``pytest`` too."""

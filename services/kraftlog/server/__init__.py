"""The composition root, named as Kafka names it: the one place that wires a process.

- :mod:`.shared_server` — :class:`~.shared_server.SharedServer`, what a controller and a
  broker in one process share (the metadata log's raft driver), and the metadata log
  dir's checks both roles make;
- :mod:`.controller_server` — :class:`~.controller_server.ControllerServer`, one
  controller quorum member (raft, QuorumController via :mod:`.controller_host`,
  RaftService, ControllerService, health, metrics, tracing);
- :mod:`.broker_server` — :class:`~.broker_server.BrokerServer`, one broker;
- :mod:`.combined_server` — Kafka's combined mode: both sharing one SharedServer.

Each server has ``start()`` / ``wait()`` / ``shutdown()`` (and ``run()``, the three in
turn). The servers build the libraries' objects and connect them, register the
telemetry hooks (tracers, metrics) with them, and own the process's signals. They
parse no command line: :mod:`kraftlog.tools` does, and calls them. No library imports
this package.
"""

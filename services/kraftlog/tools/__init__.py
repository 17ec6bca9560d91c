"""The ``kraftlog`` command and its subcommands (Kafka's ``kafka.tools`` / ``bin/`` scripts).

:mod:`.cli` assembles the subcommands; each ``*_commands`` module adds its own with
``register(subparsers)`` and owns only argument parsing, output and exit codes. The
libraries (storage, raft, timeline, metadata, controller, broker, admin, client,
pipeline) and the composition root (:mod:`kraftlog.server`) never import this package.
"""

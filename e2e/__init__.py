"""End-to-end tests: multi-process clusters (``tests.dev_cluster``), the fault-injection suite
(``python -m e2e.faults``) and the kind driver."""

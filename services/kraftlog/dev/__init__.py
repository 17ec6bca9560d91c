"""The local dev cluster: the embedded default way to run kraftlog on one machine."""

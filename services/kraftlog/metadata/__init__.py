"""Cluster metadata as values: the records of the metadata log, the image they build, snapshots.

Shared by the active controller (which generates records), standby controllers
and brokers (which replay them). Pure except the ``*convert`` edge modules.
"""

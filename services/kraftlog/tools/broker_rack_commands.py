"""``kraftlog broker-rack``: a broker's ``broker.rack`` from its Kubernetes node's zone.

Owns the Helm chart's ``rack`` init container (``broker.rackAwareness.enabled``): read
the Node the pod was scheduled on (``--node``, the pod's ``spec.nodeName`` through the
downward API) with the ``kubernetes`` client, take its zone label (``--label``, default
``topology.kubernetes.io/zone``), and write ``broker.rack=<zone>`` to ``--output``, which
the ``config`` init container appends to server.properties. The controller's replica
placement then spreads each partition's replicas over zones (Kafka's rack-aware
placement), so losing a zone loses at most one replica of a partition that has at least
as many zones as replicas to spread over.

Credentials: the pod's ServiceAccount token (in-cluster config), which the chart mounts
into this init container only; RBAC: ``get`` on ``nodes`` (a ClusterRole, Nodes being
cluster-scoped). ``--kubeconfig`` instead, for a run outside a pod. A node without the
label (kind, a single-zone cluster) writes an empty file: no rack, and says so on stderr.
An API failure (no RBAC, no such node) is one line on stderr and exit 1, so the pod does
not start with a rack silently missing.

Called by :mod:`kraftlog.tools.cli`. Edge module: the Kubernetes API, files. The ``kubernetes``
package (pyproject extra ``kind``; the image installs it) is imported only when run.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Mapping
from typing import Any

from kraftlog import errors
from kraftlog.storage import atomic_file

ZONE_LABEL = "topology.kubernetes.io/zone"
"""The well-known zone label every cloud provider's nodes carry."""
_RACK = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
"""A label value (Kubernetes' syntax), which is also a safe properties value."""


def rack_properties(labels: Mapping[str, str], label: str = ZONE_LABEL) -> str:
    """The properties text for a node's labels: ``broker.rack=<zone>\\n``, or "" when the
    node has no such label. A value no label could hold is refused (it would otherwise be
    written into the broker's config)."""
    zone = labels.get(label, "")
    if not zone:
        return ""
    if not _RACK.match(zone):
        raise errors.ConfigError(f"node label {label}={zone!r} is not a valid rack name")
    return f"broker.rack={zone}\n"


def node_labels(node: str, api_client: Any) -> dict[str, str]:
    """The labels of Node ``node`` (GET /api/v1/nodes/{node}); ConfigError on API errors."""
    from kubernetes import client  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from kubernetes.client.exceptions import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        ApiException,
    )
    from urllib3.exceptions import HTTPError

    try:
        found = client.CoreV1Api(api_client).read_node(node, _request_timeout=10)
    except ApiException as exc:
        hint = " (the ServiceAccount needs 'get nodes': the chart's ClusterRole)" \
            if exc.status == 403 else ""
        raise errors.ConfigError(f"cannot read node {node!r}: {exc.status} {exc.reason}"
                                 f"{hint}") from None
    except HTTPError as exc:
        raise errors.ConfigError(f"cannot reach the Kubernetes API to read node {node!r}: "
                                 f"{exc}") from None
    labels = found.metadata.labels if found.metadata is not None else None
    return {str(k): str(v) for k, v in (labels or {}).items()}


def api_client_from(kubeconfig: str | None) -> Any:
    """An ApiClient: in-cluster (the pod's ServiceAccount) unless ``kubeconfig`` is given."""
    try:
        from kubernetes import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            client,
            config,
        )
    except ImportError:
        raise errors.ConfigError("the kubernetes package is missing: pip install "
                                 "'kraftlog[kind]'") from None
    try:
        if kubeconfig is None:
            config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call,unused-ignore]
                config_file=kubeconfig)
    except config.ConfigException as exc:
        raise errors.ConfigError(f"cannot configure the Kubernetes client: {exc}") from None
    return client.ApiClient()


def run(args: argparse.Namespace) -> int:
    if not args.node:
        raise errors.ConfigError("--node is empty (in a pod: the downward API's spec.nodeName)")
    with api_client_from(args.kubeconfig) as api_client:
        text = rack_properties(node_labels(args.node, api_client), args.label)
    atomic_file.write_text_atomically(pathlib.Path(args.output), text)
    if text:
        print(f"kraftlog broker-rack: node {args.node}: {text.strip()}", file=sys.stderr)
    else:
        print(f"kraftlog broker-rack: node {args.node} has no {args.label} label: no "
              "broker.rack", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add ``broker-rack`` to the ``kraftlog`` command."""
    parser = subparsers.add_parser(
        "broker-rack", help="write broker.rack from this pod's Kubernetes node zone",
        description="Read the zone label of a Kubernetes node and write 'broker.rack=<zone>' "
                    "(or nothing, when the node has no such label) to a properties file: "
                    "the Helm chart's rack init container.")
    parser.add_argument("--node", required=True, metavar="NAME",
                        help="the node's name (in a pod: spec.nodeName, downward API)")
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="properties file to write (replaced atomically)")
    parser.add_argument("--label", default=ZONE_LABEL, metavar="LABEL",
                        help=f"node label holding the zone ({ZONE_LABEL})")
    parser.add_argument("--kubeconfig", default=None, metavar="FILE",
                        help="use this kubeconfig instead of the pod's ServiceAccount")
    parser.set_defaults(func=run)

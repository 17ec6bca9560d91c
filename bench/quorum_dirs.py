"""Data dirs and server.properties of a three-controller quorum on loopback, for the benchmarks.

``format_quorum(root, settings)`` runs ``kraftlog storage format`` for nodes 1-3 under
``root/node-N`` and writes ``root/node-N.properties``; returns {node id: port}.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Mapping

from anchors import etcd

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NODES = (1, 2, 3)


def format_quorum(root: pathlib.Path, settings: Mapping[str, object]) -> dict[int, int]:
    ports = dict(zip(NODES, etcd.free_ports(len(NODES)), strict=True))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    for i in NODES:
        data = root / f"node-{i}"
        done = subprocess.run([sys.executable, "-m", "kraftlog", "storage", "format",
                               "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                               "--data-dir", str(data)], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise SystemExit(f"storage format failed: {done.stderr}")
        lines = [f"node.id={i}", "process.roles=controller",
                 f"controller.quorum.voters={voters}",
                 f"listeners=CONTROLLER://127.0.0.1:{ports[i]}", f"metadata.log.dir={data}"]
        lines += [f"{k}={v}" for k, v in settings.items()]
        (root / f"node-{i}.properties").write_text("\n".join(lines) + "\n")
    return ports

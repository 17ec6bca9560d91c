"""Produce and consume throughput with mTLS on vs plaintext, in one run (A/B alternating).

Each round starts two ``kraftlog dev`` clusters one after the other (1 controller, 3
brokers, no admin service; ``--security none`` and ``--security mtls``, the order
swapped every round so neither always runs first), creates one topic (``--partitions``,
replication factor 3, min.insync.replicas=2), produces ``--records`` 1 KiB records with
the client library (acks=all, idempotent, bench/broker.py's settings) until every one is
acknowledged, reads them all back, and kills the cluster. With mTLS every hop is TLS 1.3
with client certificates: client -> leader, follower -> leader (replica Fetch), brokers
-> controller. Ratios are mTLS / plaintext of the medians over the rounds; target >= 0.8.
Only a ratio within one run means anything on a shared machine.

    .venv/bin/python bench/security.py                      # ~2 min
    .venv/bin/python bench/security.py --records 30000 --rounds 1

Prints a table and one JSON line (``{"bench": "security", ...}``). Every child process
is SIGKILLed in a ``finally``; only PIDs started here are signalled.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics
import sys
import tempfile
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from dev_cluster import DevCluster  # noqa: E402

from kraftlog import client, rpc  # noqa: E402
from kraftlog import config as kconfig  # noqa: E402
from kraftlog.security import tls  # noqa: E402

# bench/broker.py by path ("broker" on sys.path is tests/broker).
_SPEC = importlib.util.spec_from_file_location("bench_broker", HERE / "broker.py")
assert _SPEC is not None and _SPEC.loader is not None
bb: Any = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_broker"] = bb
_SPEC.loader.exec_module(bb)

TOPIC = "bench-security"
MODES = ("none", "mtls")
TARGET = 0.8


def measure(root: pathlib.Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    bb.step(f"{mode}: dev up (1 controller, 3 brokers)")
    cluster = DevCluster(root / mode)
    try:
        up = cluster.dev("up", "--base-port", str(cluster.base_port), "--no-admin",
                         "--controllers", "1", "--security", mode, "--timeout-s", "90",
                         timeout_s=150)
        if up.returncode != 0:
            raise SystemExit(f"dev up --security {mode} failed:\n{up.stdout}{up.stderr}")
        client_tls = None
        if mode == "mtls":
            values, _ = kconfig.load_properties(cluster.directory / "client.properties")
            client_tls = tls.client_tls_from_properties(values, what="client.properties")
        rpc.configure_client(client_tls)  # every channel of this phase (producer, consumer)
        pids = [int(p.read_text()) for p in cluster.directory.glob("*.pid")]
        bootstrap = tuple(cluster.broker(b) for b in bb.BROKER_IDS)
        problems: list[str] = []
        bb.wait_until(lambda: bb.create_topic([cluster.controller(1)], TOPIC, args.partitions,
                                              problems), 30, "topic created",
                      lambda: problems[-1] if problems else "no controller")
        bb.wait_full_isr(bootstrap, TOPIC, args.partitions)
        meter = bb.CpuMeter(pids)
        bb.step(f"{mode}: produce {args.records} records")
        with client.Producer(bb.producer_config(bootstrap, args)) as producer:
            for _ in range(10):
                producer.send(TOPIC, b"x" * args.record_bytes).result(timeout=30)
            produced = bb.kraftlog_produce_max(producer, TOPIC, args, meter)
        bb.step(f"{mode}: consume")
        consumed = bb.kraftlog_consume(bootstrap, TOPIC, 10 + produced["records"], args, meter)
        if not consumed["complete"]:
            raise SystemExit(f"{mode}: read {consumed['records']} of "
                             f"{10 + produced['records']} records")
        return {"produce": produced, "consume": consumed}
    finally:
        bb.kill_dev_cluster(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1024 * 1024)
    parser.add_argument("--partition-fetch-bytes", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--phase-seconds", type=float, default=60.0)
    args = parser.parse_args()
    args.partitioner = "sticky"
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
        for round_no in range(args.rounds):
            order = MODES if round_no % 2 == 0 else MODES[::-1]
            for mode in order:
                runs[mode].append(measure(pathlib.Path(tmp) / str(round_no), mode, args))

    def median(mode: str, phase: str, key: str) -> float:
        return float(statistics.median(r[phase][key] for r in runs[mode]))

    def cpu_us(mode: str, phase: str) -> float:
        return float(statistics.median(bb.cpu_us_per_record(r[phase]) for r in runs[mode]))

    # CPU per record (client + servers) moves far less than throughput when other tenants
    # take the cores: the cost of TLS shows there first.
    print(f"{'':6} {'produce msgs/s':>15} {'consume MB/s':>13} {'produce CPU us/rec':>18} "
          f"{'consume CPU us/rec':>19}")
    for mode in MODES:
        print(f"{mode:6} {median(mode, 'produce', 'msgs_per_s'):>15,.0f} "
              f"{median(mode, 'consume', 'mb_per_s'):>13.1f} "
              f"{cpu_us(mode, 'produce'):>18.1f} {cpu_us(mode, 'consume'):>19.1f}")
    produce = median("mtls", "produce", "msgs_per_s") / median("none", "produce", "msgs_per_s")
    consume = median("mtls", "consume", "mb_per_s") / median("none", "consume", "mb_per_s")
    cpu = {phase: cpu_us("none", phase) / cpu_us("mtls", phase) for phase in ("produce",
                                                                             "consume")}
    print(f"mTLS / plaintext: produce {produce:.2f}x, consume {consume:.2f}x (target >= "
          f"{TARGET}); records per CPU-second: produce {cpu['produce']:.2f}x, consume "
          f"{cpu['consume']:.2f}x")
    print(json.dumps({"bench": "security", "records": args.records, "rounds": args.rounds,
                      "produce_ratio": round(produce, 3), "consume_ratio": round(consume, 3),
                      "produce_cpu_ratio": round(cpu["produce"], 3),
                      "consume_cpu_ratio": round(cpu["consume"], 3),
                      "pass": {"produce": produce >= TARGET, "consume": consume >= TARGET},
                      "runs": runs}))


if __name__ == "__main__":
    main()

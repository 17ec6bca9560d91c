#!/usr/bin/env bash
# The README's test command: installs what it needs, then runs every check CI runs.
#   generated-code staleness, ruff, mypy --strict, pytest (unit, property, simulation,
#   multi-process, end-to-end, Spark: installs the test and spark extras; Spark needs Java 17)
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/bootstrap.sh test,spark
# bench/broker.py compares with NATS JetStream; tests/bench runs it small.
if ! command -v nats-server >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing nats-server (Debian package)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null) \
    || echo "==> could not install nats-server; tests/bench will skip its NATS run" >&2
fi
# e2e/faults runs its fault-injection seeds in network namespaces with nftables rules.
if ! command -v nft >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing nftables (Debian package)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null) \
    || echo "==> could not install nftables; e2e/faults will skip its fault-injection runs" >&2
fi
# tests/broker/test_kafka_clients.py talks to the Kafka listeners with kcat (librdkafka).
if ! command -v kcat >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing kcat (Debian package)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null) \
    || echo "==> could not install kcat; tests/broker/test_kafka_clients.py will fail its kcat tests" >&2
fi
py="$root/.venv/bin/python"
echo "==> ruff"
"$py" -m ruff check services tests bench scripts e2e
echo "==> mypy --strict"
"$py" -m mypy
echo "==> pytest"
"$py" -m pytest "$@"

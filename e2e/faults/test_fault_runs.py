"""CI's bounded share of the fault-injection suite: three pinned seeds, and the self-test.

Each seed runs ``python -m e2e.faults run --seed N --seconds 45`` (a cluster of six
processes in network namespaces, three idempotent acks=all producers, the nemesis) and
must pass every check and leave no namespace behind. Seeds 8, 11 and 42 together draw
all twelve fault kinds at 45 s (kills of a leader broker, of the active controller, of
two brokers; cuts both ways and one way of a leader and of the controller; packet loss;
pauses; two combinations). About a minute per seed on 2 cores.

Needs root, ``ip netns`` and ``nft`` (scripts/test.sh installs Debian's nftables when
root); skips with the reason otherwise. The self-test needs nothing and always runs.
``python -m e2e.faults soak --seeds N`` runs more seeds.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from e2e.faults import netns

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SEEDS = (8, 11, 42)
SECONDS = 45
RUN_TIMEOUT_S = 360


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _our_namespaces() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10,
                          check=False)
    return {line.split()[0] for line in done.stdout.splitlines()
            if line.startswith(netns.PREFIX)}


def test_self_test_catches_every_damage() -> None:
    done = subprocess.run([sys.executable, "-m", "e2e.faults", "--self-test"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MISSED" not in done.stdout and "self-test: PASS" in done.stdout


_missing = netns.missing_prerequisites()


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing), reason="the fault-injection runs need "
                    + ", ".join(_missing) if _missing else "")
@pytest.mark.parametrize("seed", SEEDS)
def test_seed_passes_every_check(seed: int, tmp_path: pathlib.Path) -> None:
    before = _our_namespaces()
    done = subprocess.run(
        [sys.executable, "-m", "e2e.faults", "run", "--seed", str(seed), "--seconds",
         str(SECONDS), "--dir", str(tmp_path)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        check=False)
    report = done.stdout + done.stderr
    assert _our_namespaces() <= before, "the run left namespaces behind"
    assert done.returncode == 0, report + "".join(
        f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(tmp_path.glob("*/*.log")))
    assert f"seed {seed}: PASS" in report
    assert "acknowledged" in report and "unavailability per fault kind" in report

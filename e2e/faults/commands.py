"""``python -m e2e.faults``: run, soak, check, self-test, cleanup (and the internal ``drive``).

Owns the command line and the host side of a run (:func:`run_seed`): it checks the
prerequisites, makes the run's network (:class:`~.netns.Network`), starts the driver
inside the client namespace (``ip netns exec ... python -m e2e.faults drive``), and
whatever happens — success, a failed check, an exception, Ctrl-C or SIGTERM — kills
every process left in the run's namespaces and deletes them. Then it reads the files
(:mod:`.collect`), runs the checks (:mod:`.checks`) and prints the report: the fault
schedule (replayable by ``--seed``), the acknowledged records, every check's counts,
the unavailability per fault and per kind. Exit status: 0 every check passed, 1 a check
failed, 2 the run could not be made (missing root/ip/nft, the cluster never came up).

Bad arguments give one line, never a traceback. Edge module.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from e2e.faults import checks, cluster, collect, driver, netns, schedule, selftest, workload
from e2e.faults import evidence as ev

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DEFAULT_SECONDS = 60.0
DEFAULT_PRODUCERS = 3
DEFAULT_RATE = 300.0
DRIVE_GRACE_S = 420.0
"""How long the driver may take beyond the fault schedule (start-up, healing, read-back,
clean stop) before the run is abandoned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedOutcome:
    seed: int
    status: int
    """0 passed, 1 a check failed, 2 the run could not be made."""
    results: tuple[checks.CheckResult, ...]
    evidence: ev.Evidence | None
    run_dir: pathlib.Path
    wall_s: float


def _print(text: str = "") -> None:
    print(text, flush=True)


class _Terminated(Exception):
    pass


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise _Terminated("SIGTERM")


def print_schedule(seed: int, plan: Sequence[schedule.FaultSpec]) -> None:
    _print(f"fault schedule of seed {seed} ({len(plan)} faults; replay with --seed {seed}):")
    for spec in plan:
        _print(f"  {spec.describe()}")


def print_report(evidence: ev.Evidence, results: Sequence[checks.CheckResult]) -> None:
    history = evidence.history
    producers = len({a.producer for a in history.acks})
    records = sum(len(r) for r in history.final_read.values())
    _print(f"acknowledged {len(history.acks)} records from {producers} producers; "
           f"indeterminate {len(history.indeterminate)}; refused by send() {history.unsent}; "
           f"in the log {records}; read during faults {len(history.observations)}")
    _print("checks:")
    for result in results:
        _print(f"  {result.describe()}")
        for violation in result.violations:
            _print(f"      {violation}")
        if result.violation_count > len(result.violations):
            _print(f"      ... and {result.violation_count - len(result.violations)} more")
    gaps = checks.unavailability(history)
    _print("unavailability (longest gap between acknowledgements, per fault):")
    for gap in gaps:
        _print(f"  #{gap.fault.index} {gap.fault.kind:40} {','.join(gap.fault.targets):30} "
               f"{gap.longest_gap_s:6.2f}s")
    _print("unavailability per fault kind (count, mean, max seconds):")
    for kind, (count, mean, longest) in checks.unavailability_by_kind(gaps).items():
        _print(f"  {kind:40} {count:3d} {mean:6.2f} {longest:6.2f}")
    for note in (*history.notes, *evidence.notes):
        _print(f"note: {note}")


def run_seed(*, seed: int, seconds: float, kinds: tuple[schedule.FaultKind, ...],
             producers: int, rate_per_s: float, delivery_timeout_ms: int,
             base_dir: pathlib.Path | None, keep: bool) -> SeedOutcome:
    """One seed, end to end, in namespaces of its own (see the module docstring)."""
    started = time.monotonic()
    plan = schedule.build_schedule(seed, seconds, partitions=driver.PARTITIONS, kinds=kinds)
    print_schedule(seed, plan)
    run_id = f"{os.getpid()}x{secrets.token_hex(2)}"
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"faults-seed{seed}-",
                                            dir=str(base_dir) if base_dir else None))
    _print(f"run {run_id}: files in {run_dir}")
    network = netns.Network(run_id, cluster.hosts())
    status = 2
    proc: subprocess.Popen[bytes] | None = None
    try:
        network.create()  # removes what it made if it fails
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        _print(f"seed {seed}: ERROR: could not make the run's network: {exc}")
        return SeedOutcome(seed=seed, status=2, results=(), evidence=None, run_dir=run_dir,
                           wall_s=time.monotonic() - started)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen(network.exec_argv(cluster.CLIENT_HOST, [
            sys.executable, "-m", "e2e.faults", "drive", "--run-dir", str(run_dir),
            "--run-id", run_id, "--seed", str(seed), "--seconds", str(seconds),
            "--faults", ",".join(k.value for k in kinds), "--producers", str(producers),
            "--rate", str(rate_per_s), "--delivery-timeout-ms", str(delivery_timeout_ms)]),
            cwd=str(REPO_ROOT), env=env)
        try:
            code = proc.wait(timeout=seconds + DRIVE_GRACE_S)
        except subprocess.TimeoutExpired:
            _print(f"the driver ran over {seconds + DRIVE_GRACE_S:g}s: abandoned")
            code = -1
        if code != 0:
            _print(f"the driver exited with {code}; node logs are in {run_dir}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for note in network.destroy():
            _print(f"cleanup: {note}")
        signal.signal(signal.SIGTERM, previous)
    evidence: ev.Evidence | None = None
    results: tuple[checks.CheckResult, ...] = ()
    if (run_dir / "history.json").exists():
        evidence = collect.collect(run_dir)
        results = checks.run_all(evidence)
        print_report(evidence, results)
        status = 0 if all(r.ok for r in results) else 1
    wall_s = time.monotonic() - started
    verdict = {0: "PASS", 1: "FAIL", 2: "ERROR (no evidence)"}[status]
    _print(f"seed {seed}: {verdict} in {wall_s:.0f}s")
    if status == 0 and not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        _print(f"kept {run_dir} (history.json, node logs, data dirs; "
               f"re-check with: python -m e2e.faults check --dir {run_dir})")
    return SeedOutcome(seed=seed, status=status, results=results, evidence=evidence,
                       run_dir=run_dir, wall_s=wall_s)


def print_soak_summary(outcomes: Sequence[SeedOutcome]) -> None:
    _print("soak summary:")
    for outcome in outcomes:
        failed = [r.name for r in outcome.results if not r.ok]
        acks = len(outcome.evidence.history.acks) if outcome.evidence else 0
        verdict = {0: "PASS", 1: "FAIL", 2: "ERROR"}[outcome.status]
        _print(f"  seed {outcome.seed:6d} {verdict:5} acknowledged {acks:7d} "
               f"{outcome.wall_s:5.0f}s" + (f"  failed: {', '.join(failed)}" if failed else ""))
    gaps = [g for o in outcomes if o.evidence for g in checks.unavailability(o.evidence.history)]
    _print("unavailability per fault kind over all seeds (count, mean, max seconds):")
    for kind, (count, mean, longest) in checks.unavailability_by_kind(gaps).items():
        _print(f"  {kind:40} {count:3d} {mean:6.2f} {longest:6.2f}")


def run_self_test(run_dir: pathlib.Path | None) -> int:
    base = collect.collect(run_dir) if run_dir is not None else None
    clean, outcomes = selftest.run(base)
    _print("self-test: the checks on " + (f"the evidence of {run_dir}" if run_dir
                                           else "clean synthetic evidence") + ":")
    for result in clean:
        _print(f"  {result.describe()}")
    clean_ok = all(r.ok for r in clean)
    _print("damaged on purpose:")
    for outcome in outcomes:
        mark = "caught" if outcome.caught else "MISSED"
        _print(f"  {mark:7} {outcome.damage.name:36} by {outcome.damage.caught_by:32} "
               f"(failed: {', '.join(outcome.failed_checks) or 'none'})")
        if outcome.example:
            _print(f"          {outcome.example}")
    ok = clean_ok and all(o.caught for o in outcomes)
    _print(f"self-test: {'PASS' if ok else 'FAIL'}"
           + ("" if clean_ok else " (the undamaged evidence already fails a check)"))
    return 0 if ok else 1


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _kinds(text: str) -> tuple[schedule.FaultKind, ...]:
    try:
        return schedule.parse_kinds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.faults",
        description="Jepsen-style fault injection against a kraftlog cluster in network "
                    "namespaces (needs root, ip and nft).")
    parser.add_argument("--self-test", action="store_true",
                        help="damage evidence on purpose and show each check catching it")
    sub = parser.add_subparsers(dest="command")

    def workload_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seconds", type=_positive, default=DEFAULT_SECONDS,
                       help=f"length of the fault schedule (default {DEFAULT_SECONDS:g})")
        p.add_argument("--faults", type=_kinds, default=tuple(schedule.FaultKind),
                       help="comma-separated fault kinds to draw from (default: all: "
                            + ", ".join(k.value for k in schedule.FaultKind) + ")")
        p.add_argument("--producers", type=int, default=DEFAULT_PRODUCERS)
        p.add_argument("--rate", type=_positive, default=DEFAULT_RATE,
                       help="records per second over all producers")
        p.add_argument("--delivery-timeout-ms", type=int,
                       default=workload.DEFAULT_DELIVERY_TIMEOUT_MS,
                       help="the producers' delivery.timeout.ms: a send not acknowledged "
                            "within it is indeterminate (default "
                            f"{workload.DEFAULT_DELIVERY_TIMEOUT_MS}, shorter than most "
                            "faults, so retried and expired batches are exercised)")

    run = sub.add_parser("run", help="one seed")
    run.add_argument("--seed", type=int, required=True)
    workload_options(run)
    run.add_argument("--dir", type=pathlib.Path, help="where to keep the run's files")
    run.add_argument("--keep", action="store_true", help="keep the files of a passing run")
    soak = sub.add_parser("soak", help="N seeds in a row")
    soak.add_argument("--seeds", type=int, required=True)
    soak.add_argument("--first-seed", type=int, default=1)
    workload_options(soak)
    soak.add_argument("--dir", type=pathlib.Path)
    soak.add_argument("--keep", action="store_true")
    check = sub.add_parser("check", help="re-run the checks on a kept run directory")
    check.add_argument("--dir", type=pathlib.Path, required=True)
    plan = sub.add_parser("schedule", help="print a seed's fault schedule")
    plan.add_argument("--seed", type=int, required=True)
    plan.add_argument("--seconds", type=_positive, default=DEFAULT_SECONDS)
    plan.add_argument("--faults", type=_kinds, default=tuple(schedule.FaultKind))
    selfcheck = sub.add_parser("self-test", help="the same as --self-test; --dir damages a "
                                                 "kept run's evidence instead")
    selfcheck.add_argument("--dir", type=pathlib.Path)
    sub.add_parser("cleanup", help="delete namespaces left by runs whose process is gone")
    drive = sub.add_parser("drive", help=argparse.SUPPRESS)
    drive.add_argument("--run-dir", type=pathlib.Path, required=True)
    drive.add_argument("--run-id", required=True)
    drive.add_argument("--seed", type=int, required=True)
    workload_options(drive)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.self_test or args.command == "self-test":
        directory = getattr(args, "dir", None)
        if directory is not None and not (directory / "history.json").exists():
            parser.error(f"--dir {directory}: no history.json there")
        return run_self_test(directory)
    if args.command is None:
        parser.error("choose a command: run, soak, check, schedule, self-test, cleanup")
    if args.command == "schedule":
        try:
            plan = schedule.build_schedule(args.seed, args.seconds, partitions=driver.PARTITIONS,
                                           kinds=args.faults)
        except ValueError as exc:
            parser.error(str(exc))
        print_schedule(args.seed, plan)
        return 0
    if args.command == "check":
        try:
            evidence = collect.collect(args.dir)
        except ValueError as exc:
            parser.error(str(exc))
        results = checks.run_all(evidence)
        print_report(evidence, results)
        return 0 if all(r.ok for r in results) else 1
    if args.command == "drive":
        try:
            return driver.drive(run_dir=args.run_dir, run_id=args.run_id, seed=args.seed,
                                seconds=args.seconds, kinds=args.faults,
                                producers=args.producers, rate_per_s=args.rate,
                                delivery_timeout_ms=args.delivery_timeout_ms)
        except KeyboardInterrupt:
            return 130
    missing = netns.missing_prerequisites()
    if missing:
        print(f"python -m e2e.faults {args.command}: needs {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.command == "cleanup":
        leftovers = netns.leftover_namespaces()
        for note in netns.destroy_namespaces(leftovers):
            _print(note)
        _print(f"deleted {len(leftovers)} leftover namespaces")
        return 0
    if args.producers < 1:
        parser.error("--producers must be at least 1")
    if args.delivery_timeout_ms < workload.REQUEST_TIMEOUT_MS + 5:
        parser.error(f"--delivery-timeout-ms must be at least {workload.REQUEST_TIMEOUT_MS + 5} "
                     "(request.timeout.ms + linger.ms)")
    try:
        schedule.build_schedule(0, args.seconds, partitions=driver.PARTITIONS, kinds=args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return _run_or_soak(args, parser)
    except (KeyboardInterrupt, _Terminated) as exc:
        print(f"python -m e2e.faults {args.command}: interrupted ({type(exc).__name__}); the "
              "run's processes and namespaces were removed", file=sys.stderr)
        return 130


def _run_or_soak(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.command == "run":
        outcome = run_seed(seed=args.seed, seconds=args.seconds, kinds=args.faults,
                           producers=args.producers, rate_per_s=args.rate,
                           delivery_timeout_ms=args.delivery_timeout_ms, base_dir=args.dir,
                           keep=args.keep)
        return outcome.status
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    outcomes = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        outcomes.append(run_seed(seed=seed, seconds=args.seconds, kinds=args.faults,
                                 producers=args.producers, rate_per_s=args.rate,
                                 delivery_timeout_ms=args.delivery_timeout_ms,
                                 base_dir=args.dir, keep=args.keep))
    print_soak_summary(outcomes)
    return max(o.status for o in outcomes)

"""Regenerate kraftlog's protobuf / gRPC Python code and its typed stubs.

Owns the generated files under ``services/kraftlog/v1/``: for every
``protos/kraftlog/v1/<name>.proto`` it writes ``<name>_pb2.py``,
``<name>_pb2_grpc.py`` and their ``.pyi`` stubs (mypy-protobuf), with
``grpc_tools.protoc -I protos`` so that generated imports read
``from kraftlog.v1 import common_pb2``.

Called by developers after editing a ``.proto``::

    .venv/bin/python scripts/gen_protos.py           # regenerate in place
    .venv/bin/python scripts/gen_protos.py --check   # exit 1, naming stale files

and by ``tests/test_generated_code.py`` (``--check``, also against copies).

It never edits generated code by hand and never touches a file in the output
directory that it does not generate (``__init__.py`` is hand-written). Output
is a pure function of the ``.proto`` files and the pinned tool versions: the
compiler and plugins write no timestamps or absolute paths, and generation runs
in a temporary directory whose name never reaches the output (checked by
re-running). Files are replaced only when their bytes change.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_PROTO_ROOT = ROOT / "protos"
DEFAULT_OUT_DIR = ROOT / "services" / "kraftlog" / "v1"
PACKAGE_DIR = pathlib.PurePosixPath("kraftlog") / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
PLUGINS = ("protoc-gen-mypy", "protoc-gen-mypy_grpc")


class GenerationError(Exception):
    """protoc or a plugin is missing or failed; the message says which and why."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """One generated file whose committed copy is stale."""

    name: str
    reason: str  # "differs", "missing" (not committed) or "extra" (no longer generated)


def is_generated_name(name: str) -> bool:
    """True for file names this script owns in the output directory."""
    return name.endswith(GENERATED_SUFFIXES)


def proto_files(proto_root: pathlib.Path) -> list[pathlib.Path]:
    """The .proto files of package kraftlog.v1, sorted for a stable protoc command line."""
    package = proto_root / PACKAGE_DIR
    files = sorted(package.glob("*.proto"))
    if not files:
        raise GenerationError(f"no .proto files in {package}")
    return files


def _plugin_path(name: str) -> pathlib.Path:
    # The plugins are console scripts of mypy-protobuf in the same virtualenv
    # as this interpreter; passing explicit paths keeps a stray plugin on PATH
    # from changing the output.
    path = pathlib.Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            raise GenerationError(
                f"{name} not found next to {sys.executable} or on PATH; "
                "install the test extra: pip install -e '.[test]' (mypy-protobuf)"
            )
        path = pathlib.Path(found)
    return path


def generate(proto_root: pathlib.Path, out_dir: pathlib.Path) -> dict[str, bytes]:
    """Run protoc on every kraftlog.v1 .proto and return {file name: bytes}.

    ``out_dir`` is a scratch directory (it must exist and may be empty); the
    returned names are relative to the kraftlog/v1 package directory.
    """
    files = proto_files(proto_root)
    command = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{proto_root}",
        f"--plugin=protoc-gen-mypy={_plugin_path('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin_path('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *(str(path.relative_to(proto_root)) for path in files),
    ]
    result = subprocess.run(command, cwd=proto_root, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise GenerationError(
            f"protoc failed (exit {result.returncode}):\n{result.stderr.strip() or result.stdout.strip()}"
        )
    package = out_dir / PACKAGE_DIR
    generated = {
        path.name: path.read_bytes()
        for path in sorted(package.iterdir())
        if path.is_file() and is_generated_name(path.name)
    }
    expected = {f"{path.stem}{suffix}" for path in files for suffix in GENERATED_SUFFIXES}
    missing = sorted(expected - generated.keys())
    if missing:
        raise GenerationError(f"protoc did not produce {', '.join(missing)}")
    return generated


def committed(out_dir: pathlib.Path) -> dict[str, bytes]:
    """The generated files currently in ``out_dir`` (hand-written files are ignored)."""
    if not out_dir.is_dir():
        return {}
    return {
        path.name: path.read_bytes()
        for path in sorted(out_dir.iterdir())
        if path.is_file() and is_generated_name(path.name)
    }


def compare(fresh: dict[str, bytes], current: dict[str, bytes]) -> list[Difference]:
    """Every file where ``current`` is not what generation produces, sorted by name."""
    differences: list[Difference] = []
    for name in sorted(fresh.keys() | current.keys()):
        if name not in current:
            differences.append(Difference(name=name, reason="missing"))
        elif name not in fresh:
            differences.append(Difference(name=name, reason="extra"))
        elif fresh[name] != current[name]:
            differences.append(Difference(name=name, reason="differs"))
    return differences


def regenerate(proto_root: pathlib.Path, out_dir: pathlib.Path) -> list[Difference]:
    """Bring ``out_dir`` up to date; return what was written or removed."""
    with tempfile.TemporaryDirectory(prefix="kraftlog-protoc-") as scratch:
        fresh = generate(proto_root, pathlib.Path(scratch))
    differences = compare(fresh, committed(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    for difference in differences:
        target = out_dir / difference.name
        if difference.reason == "extra":
            target.unlink()
        else:
            # Write beside, then rename: an interrupted run never leaves a
            # half-written module for the next import to trip over.
            partial = target.with_name(target.name + ".tmp")
            partial.write_bytes(fresh[difference.name])
            partial.replace(target)
    return differences


def check(proto_root: pathlib.Path, out_dir: pathlib.Path) -> list[Difference]:
    """Regenerate into a scratch directory and return how ``out_dir`` differs."""
    with tempfile.TemporaryDirectory(prefix="kraftlog-protoc-") as scratch:
        fresh = generate(proto_root, pathlib.Path(scratch))
    return compare(fresh, committed(out_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and list stale files if the committed code differs")
    parser.add_argument("--proto-root", type=pathlib.Path, default=DEFAULT_PROTO_ROOT,
                        help="include root holding kraftlog/v1/*.proto (default: %(default)s)")
    parser.add_argument("--out-dir", type=pathlib.Path, default=DEFAULT_OUT_DIR,
                        help="the generated package directory (default: %(default)s)")
    args = parser.parse_args(argv)
    proto_root: pathlib.Path = args.proto_root.resolve()
    out_dir: pathlib.Path = args.out_dir.resolve()
    try:
        if args.check:
            differences = check(proto_root, out_dir)
            if differences:
                print(f"generated code in {out_dir} is stale; run: .venv/bin/python scripts/gen_protos.py")
                for difference in differences:
                    print(f"  {difference.reason:8} {out_dir / difference.name}")
                return 1
            print(f"generated code in {out_dir} is up to date")
            return 0
        differences = regenerate(proto_root, out_dir)
    except GenerationError as error:
        print(f"gen_protos: {error}", file=sys.stderr)
        return 2
    for difference in differences:
        action = "removed" if difference.reason == "extra" else "wrote"
        print(f"{action} {out_dir / difference.name}")
    if not differences:
        print(f"generated code in {out_dir} already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

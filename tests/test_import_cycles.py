"""Importing kraftlog from several threads at once cannot deadlock.

CPython takes a module's import lock before its parent package's (3.11 does;
gh-83065): a thread importing ``pkg.sub`` holds ``pkg.sub``'s lock while it waits for
``pkg``'s. A package whose ``__init__`` imports one of its own modules therefore holds
``pkg`` while it waits for ``pkg.sub``: two threads meet in opposite orders, and one of
them gets ``_DeadlockError`` or "partially initialized module". ``kraftlog.client`` did
this, and failed about one start in eight when producer threads imported it.

The static rule: nothing a package's ``__init__`` imports at import time (transitively,
through every kraftlog module it reaches) lies inside that package. The runtime check
imports ``kraftlog.client`` and its rooms from many threads at once, many times over.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

SERVICES = pathlib.Path(__file__).resolve().parent.parent / "services"


def _module_file(root: pathlib.Path, name: str) -> pathlib.Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module body runs (not in functions, classes'
    methods or ``if TYPE_CHECKING:`` blocks)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _import_time_statements(node.body)
            found += _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                found += _import_time_statements(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            found += _import_time_statements(node.body)
    return found


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _imported_modules(root: pathlib.Path, name: str, path: pathlib.Path) -> set[str]:
    """The modules (with their parent packages) that ``name``'s body imports when it runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_with_parents(alias.name))
            continue
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        found.update(_with_parents(base))
        for alias in node.names:   # ``from pkg import sub`` imports the module pkg.sub
            if _module_file(root, f"{base}.{alias.name}") is not None:
                found.add(f"{base}.{alias.name}")
    return found


def package_self_imports(root: pathlib.Path, package: str) -> list[list[str]]:
    """Import chains from ``package``'s ``__init__`` that reach a module inside ``package``
    (the package itself included) at import time; empty when the rule holds."""
    top = package.split(".")[0]
    chains: list[list[str]] = []
    seen: set[str] = {package}
    stack: list[list[str]] = [[package]]
    while stack:
        chain = stack.pop()
        path = _module_file(root, chain[-1])
        if path is None:
            continue
        for name in sorted(_imported_modules(root, chain[-1], path)):
            if name == package or name.startswith(package + "."):
                if name != chain[-1]:
                    chains.append([*chain, name])
                continue
            if (name == top or name.startswith(top + ".")) and name not in seen:
                seen.add(name)
                stack.append([*chain, name])
    return chains


def _packages(root: pathlib.Path, top: str) -> list[str]:
    return sorted(".".join(p.parent.relative_to(root).parts)
                  for p in (root / top).rglob("__init__.py"))


def test_no_package_init_imports_its_own_modules_at_import_time() -> None:
    packages = _packages(SERVICES, "kraftlog")
    assert "kraftlog.client" in packages
    bad = {p: chains for p in packages if (chains := package_self_imports(SERVICES, p))}
    assert not bad, (
        f"{bad}: a package __init__ importing its own modules deadlocks against a thread "
        "importing one of them; resolve names lazily (see kraftlog.client's __getattr__)")


def test_the_checker_finds_direct_and_transitive_self_imports(tmp_path: pathlib.Path) -> None:
    pkg = tmp_path / "top" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "top" / "__init__.py").write_text("")
    (tmp_path / "top" / "other.py").write_text("import top.pkg.sub as s\n")
    (pkg / "sub.py").write_text("from top.pkg import helper\n")
    (pkg / "helper.py").write_text("")
    (pkg / "__init__.py").write_text("from .sub import x\n")
    assert package_self_imports(tmp_path, "top.pkg") == [["top.pkg", "top.pkg.sub"]]
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from top.pkg import sub\n"
        "def f():\n    from top.pkg import helper\n")
    assert package_self_imports(tmp_path, "top.pkg") == []
    (pkg / "__init__.py").write_text("from top import other\n")
    assert package_self_imports(tmp_path, "top.pkg") == [["top.pkg", "top.other", "top.pkg"],
                                                         ["top.pkg", "top.other", "top.pkg.sub"]]


_RACE = textwrap.dedent("""
    import importlib, sys, threading
    sys.setswitchinterval(1e-6)          # switch threads often: open every race window
    import grpc, kraftlog                # the slow third-party imports, once
    TARGETS = ["kraftlog.client", "kraftlog.client.producer", "kraftlog.client.consumer",
               "kraftlog.client.metadata_client", "kraftlog.client.errors",
               "kraftlog.client", "kraftlog.tools.client_commands", "kraftlog.client"]
    failures = []
    for attempt in range({rounds}):
        for name in [n for n in sys.modules if n.startswith("kraftlog.client")]:
            del sys.modules[name]
        kraftlog.__dict__.pop("client", None)
        barrier = threading.Barrier(len(TARGETS))
        def run(target):
            barrier.wait()
            try:
                importlib.import_module(target)
                # ``import pkg.sub`` may return before another thread has finished running
                # pkg's __init__; ``from kraftlog import client`` waits for it.
                from kraftlog import client
                client.Producer, client.Consumer, client.errors.ClientError, client.TopicPartition
            except BaseException as e:
                failures.append(f"round {{attempt}} {{target}}: {{type(e).__name__}}: {{e}}")
        threads = [threading.Thread(target=run, args=(t,)) for t in TARGETS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    print("\\n".join(failures[:5]))
    sys.exit(1 if failures else 0)
""")


def test_kraftlog_client_imports_from_many_threads_at_once() -> None:
    # Before the fix every one of these rounds failed (8 threads, submodules and the package).
    done = subprocess.run([sys.executable, "-c", _RACE.format(rounds=12)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

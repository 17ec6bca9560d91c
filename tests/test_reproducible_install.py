"""constraints.txt pins what pyproject.toml asks for, and every install path uses it (issue 18).

A dependency added to pyproject.toml without a refresh of constraints.txt would install
whatever version is newest that day; an exact pin in the ``test`` extra that disagrees
with constraints.txt would make every install fail. Both are caught here, cheaply, with
no network.
"""

from __future__ import annotations

import pathlib
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINNED_EXTRAS = ("test", "spark", "kind")
DEV_TOOLS = ("pytest", "pytest-timeout", "hypothesis", "mypy", "ruff")


def _constraints() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in PINNED_EXTRAS:
        texts += project["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


def test_every_requirement_is_pinned_inside_its_range() -> None:
    pins = _constraints()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in constraints.txt: run scripts/refresh_constraints.sh"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt has {name}=={pins[name]}, pyproject.toml asks {requirement}")
    assert "kraftlog" not in pins and "pip" in pins


def test_the_dev_tools_are_pinned_exactly() -> None:
    exact = {canonicalize_name(r.name): r for r in _requirements()
             if any(s.operator == "==" for s in r.specifier)}
    for tool in DEV_TOOLS:
        assert tool in exact, f"{tool} is not pinned with == in pyproject's test extra"


def test_bootstrap_and_the_image_install_with_the_constraints() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert len(re.findall(r'pip install[^\n]*-c "\$constraints"', bootstrap)) == 2
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    installs = re.findall(r"pip install[^\n]*", dockerfile)
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert "COPY pyproject.toml README.md constraints.txt" in dockerfile
    assert "!constraints.txt" in (ROOT / ".dockerignore").read_text().splitlines()

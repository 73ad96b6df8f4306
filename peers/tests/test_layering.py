"""``peers`` is the bottom layer: the scripted peer, the reference broker and the client shims' runner import
nothing from ``fixtures`` (brokers, pytest plumbing), ``conformance`` (cases, CLI) or ``reports``, so each
can be used and tested without them."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the amqp_conformance package's folder
ABOVE = ("fixtures", "conformance", "reports")


def imported_modules(path: Path, root: Path) -> list[str]:
    """Every module ``path`` (a file of the package rooted at ``root``) imports, as an absolute name
    (``from ..fixtures import x`` in ``root/peers/a.py`` reads as ``amqp_conformance.fixtures``)."""
    package = ("amqp_conformance", *path.relative_to(root).parent.parts)
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            names.append(".".join((*base, *([node.module] if node.module else []))))
    return names


def imports_from_above(root: Path) -> dict[str, list[str]]:
    """The modules under ``root/peers`` (tests aside) that import from a layer above ``peers``, with what."""
    found = {}
    for path in sorted((root / "peers").rglob("*.py")):
        if "tests" in path.relative_to(root).parts:
            continue
        above = [name for name in imported_modules(path, root)
                 if any(name.startswith(f"amqp_conformance.{layer}") for layer in ABOVE)]
        if above:
            found[str(path.relative_to(root))] = above
    return found


def test_peers_import_nothing_from_the_layers_above_them():
    assert imports_from_above(REPO) == {}


def test_the_check_finds_absolute_and_relative_imports_from_above(tmp_path):
    (tmp_path / "peers" / "sub").mkdir(parents=True)
    (tmp_path / "peers" / "a.py").write_text(textwrap.dedent("""
        from amqp_conformance.reports.records import RunRecorder
        from . import b
        from .sub import c
        """))
    (tmp_path / "peers" / "sub" / "c.py").write_text("from ...fixtures import brokers\nimport json\n")
    (tmp_path / "peers" / "tests").mkdir()
    (tmp_path / "peers" / "tests" / "t.py").write_text("from amqp_conformance.fixtures import brokers\n")
    assert imports_from_above(tmp_path) == {"peers/a.py": ["amqp_conformance.reports.records"],
                                            "peers/sub/c.py": ["amqp_conformance.fixtures"]}

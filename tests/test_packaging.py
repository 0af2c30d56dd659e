"""A non-editable install ships every subpackage: each ``agentx/**/__init__.py`` is listed."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "agentx").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"

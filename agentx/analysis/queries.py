"""Named SQL queries: the ``.sql`` files of the top-level ``analysis/`` folder.

They ship as package data ``agentx.queries``. The first comment line of each file is its
one-line description and a ``-- needs:`` line names the views it reads, so ``--list-queries``
can say which ones the loaded data can answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentx.errors import UnknownNameError

PACKAGE = "agentx.queries"


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    needs: tuple[str, ...]
    sql: str


def _parse(name: str, text: str) -> NamedQuery:
    description, needs = "", ()
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        if body.startswith("needs:"):
            needs = tuple(v.strip() for v in body[len("needs:") :].split(",") if v.strip())
        elif not description:
            description = body
    return NamedQuery(name, description, needs, text)


def list_queries() -> list[NamedQuery]:
    """Every shipped query, sorted by name."""
    files = [f for f in _folder().iterdir() if f.name.endswith(".sql")]
    return [
        _parse(f.name[: -len(".sql")], f.read_text(encoding="utf-8"))
        for f in sorted(files, key=lambda f: f.name)
    ]


def _folder():
    try:
        return resources.files(PACKAGE)
    except ModuleNotFoundError:
        # A source checkout run without installing: the package data is the analysis/ folder.
        return Path(__file__).resolve().parents[2] / "analysis"


def get_query(name: str) -> NamedQuery:
    """The query called ``name``; an unknown name answers with the closest known one."""
    queries = {q.name: q for q in list_queries()}
    if name not in queries:
        raise UnknownNameError("query", name, queries)
    return queries[name]

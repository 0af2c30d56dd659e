"""Tables generated into docs/: a test keeps each marked block equal to what the code computes
(``AGENTX_REGEN_DOCS=1`` rewrites the block instead)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def assert_block_current(doc: Path, begin: str, end: str, table: str) -> None:
    text = doc.read_text(encoding="utf-8")
    if os.environ.get("AGENTX_REGEN_DOCS"):
        text = re.sub(
            re.escape(begin) + ".*?" + re.escape(end), f"{begin}\n{table}\n{end}", text, flags=re.S
        )
        doc.write_text(text, encoding="utf-8")
    m = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), text, flags=re.S)
    assert m, f"{doc} lacks the {begin} … {end} block"
    assert m.group(1) == table, f"docs/{doc.name} is stale: rerun with AGENTX_REGEN_DOCS=1"

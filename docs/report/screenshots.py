"""Screenshots of each report section for docs/report.md (headless Chromium, PNG).

Usage: .venv/bin/python docs/report/screenshots.py REPORT.html OUT_DIR

Each section is shot alone: a copy of the page hides every other section (CSS only, the
charts render as in the report) and Chromium writes a 1,400 px wide PNG of it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1400, 1000


def shoot(page: Path, out_dir: Path) -> list[Path]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is absent (apt-get install chromium)")
    html = page.read_text()
    slugs = re.findall(r'<section class="part" data-slug="([a-z0-9-]+)">', html)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, slug in enumerate(["answer", *slugs]):
            if slug == "answer":
                css = "section.part,nav{display:none}"
            else:
                css = f'#answer,nav,section.part:not([data-slug="{slug}"]){{display:none}}'
            one = Path(tmp) / f"{slug}.html"
            one.write_text(html.replace("</style>", css + "</style>", 1))
            png = out_dir / f"{i:02d}-{slug}.png"
            subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={tmp}/profile", f"--window-size={WIDTH},{HEIGHT}",
                 "--virtual-time-budget=10000", f"--screenshot={png}", one.as_uri()],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            written.append(png)
    return written


if __name__ == "__main__":
    for p in shoot(Path(sys.argv[1]), Path(sys.argv[2])):
        print(p)

"""The HTML report opened in real headless Chromium, offline: every chart renders, no console output.

Chromium writes each page console message (errors, warnings, uncaught exceptions) to stderr as
``:CONSOLE`` lines with ``--enable-logging=stderr``; the report itself logs nothing, so any such
line from the report is a failure. The rendered DOM comes from ``--dump-dom``.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from _runs_fixture import make_runs, write_trace_file

from agentx.analysis.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is absent (.ci/run installs the Debian package 'chromium')"
)
WINDOW = (1400, 900)  # a laptop browser window, CSS px
VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class ChartCounter(HTMLParser):
    """Counts <svg> and <canvas> elements inside each element whose id starts with 'chart'."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str | None] = []
        self.drawn: dict[str, int] = {}
        self.body: dict[str, str] = {}
        self.errors: list[str] = []
        self._in_error = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = {k: v or "" for k, v in a.items()}
        cid = a.get("id") if (a.get("id") or "").startswith("chart") else None
        if cid:
            self.drawn.setdefault(cid, 0)
        if tag in ("svg", "canvas"):
            for owner in reversed(self.stack):
                if owner:
                    self.drawn[owner] += 1
                    break
        self._in_error = tag == "pre" and "error" in (a.get("class") or "")
        if tag not in VOID:
            self.stack.append(cid)

    def handle_endtag(self, tag):
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self._in_error:
            self.errors.append(data)


def render(tmp_path, html_path):
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=10000", f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--dump-dom", html_path.as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def test_report_renders_every_chart_in_chromium(tmp_path):
    trace = write_trace_file(tmp_path / "trace.parquet")
    make_runs(tmp_path / "runs", trace)
    out = tmp_path / "report.html"
    write_report([tmp_path / "runs"], out)
    dom, console = render(tmp_path, out)
    p = ChartCounter()
    p.feed(dom)
    assert console == [], console
    assert p.errors == []
    n = int(p.body["data-charts"])
    assert n == 7
    assert p.body.get("data-rendered") == str(n), p.body
    assert len(p.drawn) == n
    assert all(count >= 1 for count in p.drawn.values()), p.drawn
    # a rendered Vega-Lite chart draws its marks: the stage chart has one path per bar
    assert len(re.findall(r'role-mark[^"]*"', dom)) >= n
    check_layout(p.body, n)


def check_layout(body: dict, n: int) -> dict:
    """Measured by the page in Chromium after rendering: the answer fits the first screen and
    no chart is narrower than 60 % of the page."""
    layout = json.loads(html.unescape(body["data-layout"]))
    assert layout["page"] >= 0.9 * WINDOW[0]
    assert layout["answer_bottom"] <= layout["viewport_height"], layout
    assert len(layout["charts"]) == n
    narrow = {k: w for k, w in layout["charts"].items() if w < 0.6 * layout["page"]}
    assert narrow == {}, (narrow, layout["page"])
    return layout


def test_comparison_report_leads_with_the_answer(tmp_path, sample_trace):
    """A real agentx compare run: the first screen names each system's GPUs, J and $ per token."""
    from click.testing import CliRunner

    from agentx.cli import cli
    from agentx.fmt import num

    runs = tmp_path / "runs"
    res = CliRunner().invoke(
        cli, ["compare", str(sample_trace), "--hw", "gb200,b300", "--load-scale", "1000",
              "-o", str(runs / "compare"), "-q"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = tmp_path / "report.html"
    write_report([runs], out)
    dom, console = render(tmp_path, out)
    assert console == [], console
    p = ChartCounter()
    p.feed(dom)
    n = int(p.body["data-charts"])
    assert n >= 1 and p.body.get("data-rendered") == str(n)
    check_layout(p.body, n)
    answer = dom[dom.index('<section id="answer">') : dom.index("</section>")]
    summary = json.loads((runs / "compare" / "summary.json").read_text())
    for r in summary["systems"]:
        assert f"{r['hw'].upper()}: {num(r['gpus'])} GPUs" in answer
        assert f"{num(r['j_per_output_token'])} J per output token" in answer
        assert f"${num(r['usd_per_m_output_tokens'])} per M output tokens" in answer


def test_console_errors_are_caught(tmp_path):
    """The check can fail: a page that throws is reported."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><div id=chart00></div><script>undefinedFunction()</script></body></html>"
    )
    dom, console = render(tmp_path, page)
    assert any("undefinedFunction is not defined" in line for line in console)
    p = ChartCounter()
    p.feed(dom)
    assert p.drawn == {"chart00": 0}


def test_agentic_report_renders_in_chromium(tmp_path, agentic_runs):
    """Real simulate --users runs with and without offload: the concurrent-sessions section's
    three charts render without a console message, each at least 60 % of the page wide."""
    out = tmp_path / "report.html"
    write_report([agentic_runs["none"], agentic_runs["dram"]], out)
    dom, console = render(tmp_path, out)
    assert console == [], console
    p = ChartCounter()
    p.feed(dom)
    assert p.errors == []
    n = int(p.body["data-charts"])
    assert n == 3
    assert p.body.get("data-rendered") == str(n), p.body
    assert all(count >= 1 for count in p.drawn.values()), p.drawn
    layout = check_layout(p.body, n)
    assert set(layout["charts"]) == {"chart00", "chart00-2", "chart00-3"}

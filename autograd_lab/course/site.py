"""``make site``: the read-only course, every notebook executed and rendered to HTML.

Self-learners who only want to read get the labs with their outputs, as they ran
on the build machine, without installing anything.  A notebook that fails to execute
is still written (with its error visible) and makes the exit status non-zero.

Why nbconvert and not Jupyter Book / MyST (both tried on the course's notebooks):

- ``mystmd`` 1.8.3 (npm; the engine of Jupyter Book 2): ``myst build --html`` fetches its
  theme from api.mystmd.org at build time, so the site cannot be built offline, and it
  would add Node.js to a Python course's set-up.
- Jupyter Book 1.0.4 (PyPI, Sphinx): builds offline with a sidebar and search, but it is
  the superseded line, brings about 90 packages into the course environment, and still
  loads MathJax from a CDN unless bundled, as here.
- nbconvert is already in the course environment and renders outputs exactly as
  JupyterLab does (its ``lab`` template uses JupyterLab's CSS); a small template
  (``site_template/``) adds the navigation.  MathJax comes from the
  ``jupyter-server-mathjax`` wheel and is copied next to the pages, so formulas render
  with no network; nothing on a page is loaded from elsewhere.

Exercise cells run unanswered, so they show the prompt and the "not attempted"
feedback, never a solution.  Every output, timings included, is measured at build
time; each page says so, with the date and machine.
"""

import argparse
import html
import os
import platform
import re
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import jupyter_server_mathjax
from nbconvert import HTMLExporter
from nbconvert.filters import markdown2html

from . import executed as runs

TEMPLATE_DIR = Path(__file__).parent / "site_template"
MATHJAX_DIR = Path(jupyter_server_mathjax.__file__).parent / "static"
# jupyter-server-mathjax bundles this one combined configuration (and Safe).
MATHJAX_URL = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
# A static page cannot run a widget (the trace_backward slider needs a live kernel), so
# the page shows what a saved notebook shows: the plain picture the trace keeps beside
# its slider.  Widget outputs are dropped after execution (WIDGET_VIEW).
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

STYLE = """
body { margin: 0; }
nav.site { display: flex; gap: 1.5em; align-items: baseline; padding: 0.6em 1.2em;
  background: #24292f; color: #f6f8fa; font: 15px/1.4 system-ui, sans-serif; }
nav.site a { color: #f6f8fa; text-decoration: none; }
nav.site a:hover { text-decoration: underline; }
nav.site .home { font-weight: 600; margin-right: auto; }
p.built { margin: 0.5em 1.2em; color: #57606a; font: 13px/1.4 system-ui, sans-serif; }
main { max-width: 1100px; margin: 0 auto; }
body.index { font: 16px/1.55 system-ui, sans-serif; color: #1f2328; }
body.index main { padding: 0 1.2em 3em; }
body.index ol { padding-left: 0; list-style: none; }
body.index li { margin: 1.2em 0; padding: 0.8em 1em; border-left: 4px solid #ee4c2c; background: #f6f8fa; }
body.index li a { font-size: 1.15em; font-weight: 600; color: #0550ae; text-decoration: none; }
body.index li p { margin: 0.4em 0 0; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.92em; }
.failed { color: #cf222e; font-weight: 600; }
"""


def without_widgets(notebook):
    """Drop the outputs a static page cannot show: live widgets (their text is "VBox(children=...)")."""
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    notebook.metadata.pop("widgets", None)
    return notebook


def title_of(notebook, fallback):
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            return cell.source.splitlines()[0][2:].strip()
    return fallback


def summary_of(notebook):
    """The lab's opening paragraph: what it teaches."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            paragraphs = cell.source.split("\n\n")
            return paragraphs[1].strip() if len(paragraphs) > 1 else ""
    return ""


def inline_html(markdown):
    """One line of Markdown (a title) as HTML: `code` becomes <code>, the rest is escaped."""
    parts = re.split(r"`([^`]*)`", markdown)
    return "".join(f"<code>{html.escape(part)}</code>" if odd else html.escape(part)
                   for odd, part in ((i % 2 == 1, p) for i, p in enumerate(parts)))


def plain_text(markdown):
    return markdown.replace("`", "")


def nav_bar(pages, position):
    """Home, previous and next links; ``position`` is the page's index (None: the index page)."""
    links = ['<a class="home" href="index.html">autograd-lab</a>']
    if position is not None:
        if position > 0:
            page, title = pages[position - 1]
            links.append(f'<a class="previous" href="{html.escape(page)}">← {inline_html(title)}</a>')
        if position + 1 < len(pages):
            page, title = pages[position + 1]
            links.append(f'<a class="next" href="{html.escape(page)}">{inline_html(title)} →</a>')
    return f'<nav class="site">{" ".join(links)}</nav>'


def build_note(built):
    return (f'<p class="built">Every output on this page, timings included, was measured when this site '
            f"was built: {html.escape(built)}. Recorded benchmarks with their machines are in "
            "<code>docs/benchmarks.md</code>.</p>")


def machine_description():
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    import torch
    return (f"{now} on {platform.machine()} {platform.system()}, {os.cpu_count()} CPU cores, "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def index_page(entries, built):
    items = "\n".join(
        f'<li><a href="{html.escape(page)}">{inline_html(title)}</a>'
        f'{" <span class=failed>(failed to run)</span>" if failed else ""}{markdown2html(summary)}</li>'
        for page, title, summary, failed in entries)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<title>autograd-lab</title><link rel='stylesheet' href='site.css'></head>"
            f"<body class='index'>{nav_bar([], None)}<main><h1>autograd-lab</h1>"
            "<p>How PyTorch autograd really works: nine labs, every one executed, with its outputs. "
            "To run them yourself, clone the repository and type <code>make lab</code>.</p>"
            f"<ol>\n{items}\n</ol>{build_note(built)}</main></body></html>\n")


def exporter():
    exporter = HTMLExporter(template_name="autograd_lab_site", extra_template_basedirs=[str(TEMPLATE_DIR)])
    exporter.mathjax_url = MATHJAX_URL
    return exporter


def build(sources, out_dir, executed_dir=None, jobs=2):
    """Render ``sources`` to ``out_dir``, from the copies ``executed_dir`` holds, or run them first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(MATHJAX_DIR, out_dir / "mathjax", dirs_exist_ok=True)
    (out_dir / "site.css").write_text(STYLE)
    built = machine_description()
    paths = runs.notebook_paths(sources)
    with tempfile.TemporaryDirectory(prefix="autograd-lab-site-") as scratch:
        if executed_dir is None:
            executed_dir = Path(scratch)
            runs.run(paths, executed_dir, jobs)
        executed = []
        for path in paths:
            notebook, error = runs.read(executed_dir, path.name)
            executed.append((path, without_widgets(notebook), error and error.splitlines()[0]))
    failures = sum(error is not None for _, _, error in executed)
    pages = [(path.with_suffix(".html").name, title_of(notebook, path.stem)) for path, notebook, _ in executed]
    html_exporter = exporter()
    for position, (path, notebook, error) in enumerate(executed):
        notebook.metadata["title"] = plain_text(pages[position][1])
        site = {"nav": nav_bar(pages, position), "banner": build_note(built)}
        body, _ = html_exporter.from_notebook_node(notebook, resources={"site": site})
        (out_dir / pages[position][0]).write_text(body, encoding="utf-8")
    entries = [(page, title, summary_of(notebook), error is not None)
               for (page, title), (_, notebook, error) in zip(pages, executed)]
    (out_dir / "index.html").write_text(index_page(entries, built), encoding="utf-8")
    print(f"wrote {len(entries)} notebooks to {out_dir / 'index.html'}")
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograd_lab.course.site", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", help="notebook files or folders")
    parser.add_argument("--out", required=True, type=Path, help="folder for the HTML pages")
    parser.add_argument("--executed", type=Path, default=None,
                        help="a folder of copies that `python -m autograd_lab.course.executed` ran "
                             "(make test-notebooks); without it the notebooks run first")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    args = parser.parse_args(argv)
    return build(args.notebooks, args.out, args.executed, args.jobs)


if __name__ == "__main__":
    sys.exit(main())

"""``make site``: the read-only course, every notebook executed and rendered to HTML.

Self-learners who only want to read get the labs with their outputs, as they ran
on this machine, without installing anything.  A notebook that fails to execute
is still written (with its error visible) and makes the exit status non-zero.
"""

import argparse
import html
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter

CELL_TIMEOUT_S = 120


def notebook_paths(sources):
    paths = []
    for source in map(Path, sources):
        paths += sorted(source.glob("*.ipynb")) if source.is_dir() else [source]
    return paths


def execute(path):
    """Run ``path`` top to bottom in a fresh kernel; return the executed notebook and any error."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
        return notebook, None
    except CellExecutionError as error:
        return notebook, str(error).splitlines()[0] if str(error) else "a cell failed"


def title_of(notebook, fallback):
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            return cell.source.splitlines()[0][2:].strip()
    return fallback


def index_page(entries):
    items = "\n".join(
        f'<li><a href="{html.escape(page)}">{html.escape(title)}</a>{" (failed to run)" if failed else ""}</li>'
        for page, title, failed in entries)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>autograd-lab</title></head>"
            "<body><h1>autograd-lab</h1><p>How PyTorch autograd really works: every lab, "
            f"executed.</p><ol>\n{items}\n</ol></body></html>\n")


def build(sources, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    entries, failures = [], 0
    for path in notebook_paths(sources):
        print(f"executing {path.name} ...", flush=True)
        notebook, error = execute(path)
        if error:
            failures += 1
            print(f"  failed: {error}", file=sys.stderr)
        body, _ = exporter.from_notebook_node(notebook)
        page = path.with_suffix(".html").name
        (out_dir / page).write_text(body, encoding="utf-8")
        entries.append((page, title_of(notebook, path.stem), error is not None))
    (out_dir / "index.html").write_text(index_page(entries), encoding="utf-8")
    print(f"wrote {len(entries)} notebooks to {out_dir / 'index.html'}")
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograd_lab.site", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", help="notebook files or folders")
    parser.add_argument("--out", required=True, type=Path, help="folder for the HTML pages")
    args = parser.parse_args(argv)
    return build(args.notebooks, args.out)


if __name__ == "__main__":
    sys.exit(main())

"""Each notebook run once, top to bottom in a fresh kernel, and kept with its outputs.

``make test`` needs every shipped notebook three ways: it must run with no error and
nothing on stderr (the course's own test), the numbers in its prose must appear in its
outputs (``tests/test_prose_numbers.py``), and the site shows its outputs.  Running
each notebook once into ``build/executed/`` and reading the copies there keeps the
suite inside CI's time: a run of the nine labs is minutes on a 2-core machine.

    python -m autograd_lab.course.executed notebooks --out build/executed --jobs 2

Exit status 1 if a cell raised or wrote to stderr; every such cell is printed with its
error.  ``results.json`` beside the copies records the same, for the site's index.
"""

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 120
RESULTS = "results.json"


def notebook_paths(sources):
    paths = []
    for source in map(Path, sources):
        paths += sorted(source.glob("*.ipynb")) if source.is_dir() else [source]
    return paths


def execute(path):
    """Run ``path`` in a fresh kernel; return the executed notebook and its error (``None`` if clean)."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="autograd-lab-run-") as sockets:
        # Local IPC sockets instead of TCP ports: private, and ipykernel has nothing to warn about.
        manager = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
        manager.connection_file = os.path.join(sockets, "connection.json")
        client = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT_S,
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
            error = stderr_problem(notebook)
        except CellExecutionError as failure:
            error = str(failure) or "a cell failed"
        finally:
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    return notebook, error


def stderr_problem(notebook):
    """The first cell that wrote to stderr: warnings are shown on purpose with ``expect_warning``.

    A stray warning is noise that students learn to ignore, and graders such as nbgrader
    score such a cell zero (the same rule as the root ``conftest.py`` for nbval runs).
    """
    for index, cell in enumerate(notebook.cells):
        text = "".join(out.get("text", "") for out in cell.get("outputs", [])
                       if out.get("output_type") == "stream" and out.get("name") == "stderr")
        if text.strip():
            return (f"cell {index} ({cell.get('id', '?')}) wrote to stderr "
                    f"(show warnings with expect_warning):\n{text.strip()[:1000]}")
    return None


def _run_one(path, out_dir):
    notebook, error = execute(path)
    nbformat.write(notebook, Path(out_dir) / Path(path).name)
    return Path(path).name, error


def run(paths, out_dir, jobs=2):
    """Execute ``paths`` (``jobs`` kernels at a time) into ``out_dir``; return ``{name: error or None}``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS).unlink(missing_ok=True)
    # Separate processes, not threads: each nbclient run owns an event loop and a kernel.
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_run_one, str(path), str(out_dir)) for path in paths]
        results = {}
        for future in futures:
            name, error = future.result()
            print(f"{name}: {'FAILED' if error else 'ran clean'}", flush=True)
            if error:
                print(error, file=sys.stderr, flush=True)
            results[name] = error
    (out_dir / RESULTS).write_text(json.dumps(results, indent=1))
    return results


def read(out_dir, name):
    """The executed copy of notebook ``name`` and its error, as ``run`` left them."""
    out_dir = Path(out_dir)
    results = json.loads((out_dir / RESULTS).read_text())
    return nbformat.read(out_dir / name, as_version=4), results[name]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograd_lab.course.executed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", help="notebook files or folders")
    parser.add_argument("--out", required=True, type=Path, help="folder for the executed copies")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    args = parser.parse_args(argv)
    results = run(notebook_paths(args.notebooks), args.out, args.jobs)
    failed = [name for name, error in results.items() if error]
    print(f"{len(results) - len(failed)} of {len(results)} notebooks ran clean"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

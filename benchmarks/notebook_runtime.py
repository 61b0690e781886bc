"""Wall time of every lab, executed top to bottom in a fresh kernel, shipped and solved.

The course promises that each notebook runs in well under a minute on a 2-core CPU.
This measures it (kernel start-up included, as a student experiences it) and prints
a Markdown table for docs/benchmarks.md.  There is no peer to compare with here: the
figure to beat is the one-minute budget itself.

    .venv/bin/python benchmarks/notebook_runtime.py notebooks
    .venv/bin/python benchmarks/notebook_runtime.py notebooks/05_amp.ipynb
"""

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import nbformat
from nbclient import NotebookClient

BUDGET_S = 60


def run_seconds(path, env):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    old_env = os.environ.copy()
    os.environ.update(env)  # the kernel inherits the environment at start-up
    try:
        start = time.perf_counter()
        client.execute()
        return time.perf_counter() - start
    finally:
        os.environ.clear()
        os.environ.update(old_env)


def solved_copies(paths, out_dir):
    subprocess.run([sys.executable, "-m", "autograd_lab.course.cli", "solve", *map(str, paths), "--out", str(out_dir)],
                   check=True, capture_output=True)
    return out_dir


def notebook_paths(sources):
    paths = []
    for source in sources:
        paths += sorted(source.glob("*.ipynb")) if source.is_dir() else [source]
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", type=Path, nargs="*", default=[Path("notebooks")],
                        help="notebooks or folders of them (default: notebooks)")
    args = parser.parse_args()
    paths = notebook_paths(args.sources)
    with tempfile.TemporaryDirectory() as tmp:
        solved_dir = solved_copies(paths, Path(tmp))
        print(f"Measured {date.today()} on {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}.\n")
        print("| notebook | shipped (s) | solved, strict (s) | within budget |")
        print("|---|---|---|---|")
        for path in paths:
            shipped = run_seconds(path, {"CI": "true"})
            solved = run_seconds(solved_dir / path.name, {"AUTOGRAD_LAB_STRICT": "1"})
            ok = "yes" if max(shipped, solved) < BUDGET_S else "NO"
            print(f"| `{path.stem}` | {shipped:.1f} | {solved:.1f} | {ok} |", flush=True)


if __name__ == "__main__":
    main()

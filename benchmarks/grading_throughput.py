"""Grading throughput: 40 submissions graded by ``autograd-lab grade``, with wall time.

The batch mixes correct, partly wrong and hostile notebooks, including two
infinite loops (``tests/fixtures/grading/submissions.py`` builds them).  Run::

    .venv/bin/python benchmarks/grading_throughput.py [--jobs 2] [--cell-timeout 10]

It prints a Markdown table for ``docs/benchmarks.md``.  The peer, ``nbgrader
autograde``, is measured on the same 40 notebooks in the same run when
``--nbgrader PATH`` names an nbgrader executable installed in a throwaway
environment (it is not a dependency of the course; ``--nbgrader auto`` takes
``~/.cache/autograd-lab/venvs/nbgrader/bin/nbgrader``, made with
``python3 -m venv ~/.cache/autograd-lab/venvs/nbgrader`` and
``~/.cache/autograd-lab/venvs/nbgrader/bin/pip install nbgrader``).  With
``--rounds N`` the two graders take turns N times, so a change in the machine's
load hits both alike; the table gives each round and the median.  The notebooks get the nbgrader cell metadata it needs
(the exercise cells become solution cells, the check cells become test cells
with plain asserts), and its kernel is this environment's Python, so both graders
run the same code.  See ``docs/benchmarks.md`` for why otter cannot run here.

``--class N`` grades a class instead: N students who each hand in the course's real
notebook 00 (made by ``autograd-lab solve``, every cell of the lab, a third of them with
a wrong ``cube_grad``), which nbgrader grades too, so the two compare per submission on
the same class (issue 21.6; the 40-file batch stops nbgrader at its first duplicated cell).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from copy import deepcopy
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import nbformat  # noqa: E402
from fixtures.grading.submissions import base_cells, write_submissions  # noqa: E402

from autograd_lab.grading.batch import Options, grade_batch  # noqa: E402

# 40 submissions: what a real class hands in, plus the ones that sink other graders.
MIX = {"correct": 14, "partly_wrong": 10, "fake_passed_text": 4, "deleted_cells": 4,
       "duplicated_and_reordered": 4, "infinite_loop": 2, "redefines_check": 1, "malformed": 1}


def build_batch(folder):
    for case, copies in MIX.items():
        written = write_submissions(folder, [case], copies=copies)
        if copies == 1:  # keep every file name unique and numbered alike
            path = written[case]
            path.rename(folder / f"{case}_0.ipynb")
    return sorted(folder.glob("*.ipynb"))


def build_class(folder, size):
    """``size`` students' copies of the solved notebook 00; every third has a wrong cube_grad."""
    solved = folder.parent / "solved"
    subprocess.run([sys.executable, "-m", "autograd_lab.course.cli", "solve",
                    str(Path(__file__).resolve().parents[1] / "notebooks" / "00_start_here.ipynb"),
                    "--out", str(solved)], check=True, capture_output=True)
    notebook = nbformat.read(str(next(solved.glob("00_*.ipynb"))), as_version=4)
    for student in range(size):
        copy = deepcopy(notebook)
        if student % 3 == 2:
            cell = next(c for c in copy.cells if c.metadata.get("autograd_lab", {}).get("exercise") == "00.cube_grad")
            cell.source = "def cube_grad(x):\n    return 2 * x ** 2"
        nbformat.write(copy, str(folder / f"student_{student:02d}.ipynb"))
    return sorted(folder.glob("*.ipynb"))


def nbgrader_tests():
    """nbgrader's test cells: plain asserts, with the key computed by the reference."""
    from autograd_lab import checking
    return {"00.cube_grad": "x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)\n"
                            "assert torch.allclose(cube_grad(x), 3 * x ** 2)",
            "00.needs_grad": f"assert needs_grad == {checking.get('00.needs_grad').reference()!r}"}


def _as_nbgrader(notebook):
    """The same notebook with nbgrader's metadata: exercise cells are solutions, checks are tests."""
    cells = notebook.cells
    for index, cell in enumerate(cells):
        exercise_id = cell.metadata.get("autograd_lab", {}).get("exercise")
        if exercise_id is None:
            continue
        name = exercise_id.split(".")[1]
        cell.metadata["nbgrader"] = {"grade": False, "grade_id": name, "locked": False,
                                     "schema_version": 3, "solution": True, "task": False}
        following = cells[index + 1] if index + 1 < len(cells) else None
        if following is not None and following.source.startswith("check("):
            following.source = nbgrader_tests()[exercise_id]
            following.metadata["nbgrader"] = {"grade": True, "grade_id": f"test_{name}", "locked": True,
                                              "points": 1, "schema_version": 3, "solution": False,
                                              "task": False}
    return notebook


def time_nbgrader(nbgrader, files, root, cell_timeout, master=None):
    """Wall seconds of ``nbgrader autograde`` on ``files``; the course folder is built under ``root``."""
    source = root / "source" / "ps0"
    source.mkdir(parents=True)
    master = master or nbformat.v4.new_notebook(cells=base_cells(), metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(_as_nbgrader(master), str(source / "ps0.ipynb"))
    for path in files:
        target = root / "submitted" / path.stem / "ps0"
        target.mkdir(parents=True)
        try:
            nbformat.write(_as_nbgrader(nbformat.read(str(path), as_version=4)), str(target / "ps0.ipynb"))
        except Exception:  # the malformed file stays malformed
            (target / "ps0.ipynb").write_text(path.read_text())
    # nbgrader starts the kernel "python3": make that this environment's Python, with torch.
    kernel = root / "jupyter" / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\nc.CourseDirectory.course_id = 'bench'\n"
        f"c.Execute.timeout = {int(cell_timeout)}\n")
    env = dict(os.environ, JUPYTER_PATH=str(root / "jupyter"),  # nbgrader also runs its venv's alembic
               PATH=os.path.dirname(nbgrader) + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run([nbgrader, "generate_assignment", "ps0", "--force"], cwd=root, env=env,
                   check=True, capture_output=True)
    started = time.monotonic()
    run = subprocess.run([nbgrader, "autograde", "ps0", "--create", "--force"], cwd=root, env=env,
                         capture_output=True, text=True)
    wall = time.monotonic() - started
    graded = len(list((root / "autograded").glob("*/ps0/ps0.ipynb")))
    log = (run.stdout + run.stderr).splitlines()
    first_error = next((i for i, line in enumerate(log) if "| ERROR]" in line), None)
    # The line before nbgrader's first error usually names the submission and the cause.
    why = " / ".join(line.split("]", 1)[-1].strip() for line in log[max(first_error - 1, 0):first_error + 1]) \
        if first_error is not None else ""
    return wall, graded, run.returncode, why


def _nbgrader_path(argument):
    if argument != "auto":
        return argument
    path = Path(os.environ.get("AUTOGRAD_LAB_CACHE", Path.home() / ".cache" / "autograd-lab")) / "venvs" / "nbgrader"
    path = path / "bin" / "nbgrader"
    if not path.exists():
        raise SystemExit(f"--nbgrader auto: {path} is missing; make it with python3 -m venv and pip install nbgrader")
    return str(path)


def _median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cell-timeout", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nbgrader", help="an nbgrader executable (in a throwaway venv), or 'auto'")
    parser.add_argument("--class", dest="class_size", type=int, default=0,
                        help="grade a class of N real notebook-00 submissions instead of the 40-file batch")
    args = parser.parse_args(argv)
    nbgrader = _nbgrader_path(args.nbgrader) if args.nbgrader else None
    ours, theirs, statuses, sandbox = [], [], Counter(), ""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "submissions")
        folder.mkdir()
        files = build_class(folder, args.class_size) if args.class_size else build_batch(folder)
        for round_number in range(args.rounds):
            options = Options(out=os.path.join(tmp, f"out{round_number}"), jobs=args.jobs,
                              cell_timeout=args.cell_timeout, notebooks=("00",), progress=True)
            started = time.monotonic()
            reports = grade_batch([str(folder)], options)
            ours.append(time.monotonic() - started)
            statuses = Counter(g["status"] for r in reports for g in r["exercises"])
            sandbox = reports[0]["sandbox"]
            if nbgrader:
                master = nbformat.read(str(files[0]), as_version=4) if args.class_size else None
                theirs.append(time_nbgrader(nbgrader, files, Path(tmp, f"nbgrader{round_number}"), args.cell_timeout,
                                            master))
    load = os.getloadavg()[0]
    print(f"\nMeasured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPU cores, "
          f"Python {platform.python_version()}; 1-minute load average at the end: {load:.1f}.\n")
    print("| grader | submissions | jobs | cell timeout | wall time per round | median | per submission |")
    print("|---|---|---|---|---|---|---|")
    wall = _median(ours)
    print(f"| autograd-lab grade | {len(files)} | {args.jobs} | {args.cell_timeout:g} s | "
          f"{', '.join(f'{w:.0f} s' for w in ours)} | {wall:.0f} s | {wall / len(files):.2f} s |")
    if theirs:
        peer_wall = _median([t[0] for t in theirs])
        graded, returncode, why = theirs[-1][1:]
        print(f"| nbgrader autograde (exit status {returncode}, {graded} notebooks autograded) | {len(files)} | 1 "
              f"(serial only) | {args.cell_timeout:g} s | {', '.join(f'{t[0]:.0f} s' for t in theirs)} | "
              f"{peer_wall:.0f} s | {peer_wall / max(graded, 1):.2f} s |")
        print(f"\nPer submission, autograd-lab takes {wall / len(files) / (peer_wall / max(graded, 1)):.2f} times "
              "nbgrader's time (below 1: faster).")
        if why:
            print(f"\nnbgrader's first error: {why[:300]}")
    print(f"\nExercise verdicts: {dict(sorted(statuses.items()))}")
    print(f"Kernels ran in: {sandbox} (the wall time includes building the student build once).")
    if not args.class_size:
        print(f"Target: under 90 s, sandbox on. {'Met' if wall < 90 else 'Not met'} in this run (median).")


if __name__ == "__main__":
    main()

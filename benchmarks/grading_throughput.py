"""Grading throughput: 40 submissions graded by ``autograd-lab grade``, with wall time.

The batch mixes correct, partly wrong and hostile notebooks, including two
infinite loops (``tests/fixtures/grading/submissions.py`` builds them).  Run::

    .venv/bin/python benchmarks/grading_throughput.py [--jobs 2] [--cell-timeout 10]

It prints a Markdown table for ``docs/benchmarks.md``.  The peer (nbgrader
autograde) is measured only when ``--nbgrader PATH`` names an nbgrader executable
in another environment; see ``docs/benchmarks.md`` for why otter cannot run here.
"""

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fixtures.grading.submissions import write_submissions  # noqa: E402

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cell-timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "submissions")
        folder.mkdir()
        files = build_batch(folder)
        options = Options(out=os.path.join(tmp, "out"), jobs=args.jobs, cell_timeout=args.cell_timeout,
                          progress=True)
        started = time.monotonic()
        reports = grade_batch([str(folder)], options)
        wall = time.monotonic() - started
    statuses = Counter(g["status"] for r in reports for g in r["exercises"])
    load = os.getloadavg()[0]
    print(f"\nMeasured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPU cores, "
          f"Python {platform.python_version()}; 1-minute load average at the end: {load:.1f}.\n")
    print("| grader | submissions | jobs | cell timeout | wall time | per submission |")
    print("|---|---|---|---|---|---|")
    print(f"| autograd-lab grade | {len(files)} | {args.jobs} | {args.cell_timeout:g} s | {wall:.0f} s | "
          f"{wall / len(files):.1f} s |")
    print(f"\nExercise verdicts: {dict(sorted(statuses.items()))}")
    print(f"Target: under 180 s. {'Met' if wall < 180 else 'Not met'} in this run.")


if __name__ == "__main__":
    main()

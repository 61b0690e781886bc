"""The ``autograd-lab`` command.  Each subcommand's work lives in its own module."""

import argparse
import sys
from importlib import import_module


def _runner(module_name):
    """Import the subcommand's module only when it runs, so ``doctor`` works even if torch is broken."""
    def run(args):
        return import_module(module_name).main(args)
    return run


def build_parser():
    parser = argparse.ArgumentParser(prog="autograd-lab", description="Tools for the autograd-lab course.")
    commands = parser.add_subparsers(dest="command", required=True)

    doctor = commands.add_parser("doctor", help="check that this machine is ready for the course")
    doctor.add_argument("--quick", action="store_true",
                        help="only what needs no torch import (installed versions, dot); make lab runs this")
    doctor.set_defaults(run=_runner("autograd_lab.course.doctor"))

    solve = commands.add_parser("solve", help="write copies of notebooks with every exercise solved")
    solve.add_argument("notebooks", nargs="+", help="notebook files or folders")
    solve.add_argument("--out", required=True, help="folder for the solved copies")
    solve.set_defaults(run=_runner("autograd_lab.course.solve"))

    workspace = commands.add_parser("workspace", help="make your own copies of the notebooks in work/ (never overwrites your edits)")
    reset = commands.add_parser("reset", help="replace your copy of a notebook with a fresh one, keeping a backup")
    reset.add_argument("notebook", nargs="+", metavar="NN",
                       help="the notebook's number or file name, e.g. 01 or 01_dynamic_graph.ipynb")
    lab = commands.add_parser("lab", help="open the course in JupyterLab on your copies in work/ (what make lab runs)",
                              epilog="Other arguments (--no-browser, --port=8899, ...) go to JupyterLab.",
                              allow_abbrev=False)
    for command in (workspace, reset, lab):
        command.add_argument("--course", help="the shipped notebooks (default: the one work/ was made from, else ./notebooks)")
        command.add_argument("--work", help="your copies (default: this folder if it is work/, else ./work)")
        command.set_defaults(run=_runner("autograd_lab.course.workspace"))
    lab.set_defaults(run=_runner("autograd_lab.course.lab"))

    release = commands.add_parser("release", help="write the student build: notebooks and a package without solutions")
    release.add_argument("--out", required=True, help="folder for notebooks/ and autograd_lab/")
    release.add_argument("--self-study", action="store_true", help="keep the solutions (solution() works)")
    release.set_defaults(run=_runner("autograd_lab.grading.release"))

    gradescope = commands.add_parser("gradescope", help="build a Gradescope autograder zip from an assignment file")
    gradescope.add_argument("assignment", help="the assignment file (TOML or YAML)")
    gradescope.add_argument("--out", required=True, help="the zip to write")
    gradescope.set_defaults(run=_runner("autograd_lab.grading.gradescope"))

    grade = commands.add_parser("grade", help="grade student submissions in batch")
    grade.add_argument("submissions", nargs="+", help="submitted .ipynb files or folders of them")
    grade.add_argument("--out", required=True, help="folder for the per-student JSON, gradebook and reports")
    grade.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel (default 2)")
    grade.add_argument("--cell-timeout", type=float, default=60, help="seconds per notebook cell (default 60)")
    grade.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")
    grade.add_argument("--notebook", action="append", metavar="NN",
                       help="grade the exercises of notebook NN (repeatable; required without --assignment)")
    grade.add_argument("--check-timeout", type=float, default=10, help="seconds per call of a student's answer (default 10)")
    grade.add_argument("--memory-mb", type=int, default=2048, help="resident memory of each submission's sandbox, all its processes together, in MiB (default 2048)")
    grade.add_argument("--allow-unsandboxed", action="store_true",
                       help="grade even where the bubblewrap sandbox cannot run (unsafe: a submission can then change other students' grades)")
    grade.add_argument("--submission-timeout", type=float, default=900,
                       help="wall-clock seconds for one whole submission before it is stopped (default 900)")
    grade.add_argument("--kernel-python", metavar="PATH",
                       help="Python for the students' kernels, with torch, ipykernel and autograd_lab (default: this one)")
    grade.add_argument("--assignment", metavar="FILE",
                       help="grade per student against an assignment file (docs/instructors.md); SUBMISSIONS is one folder")
    grade.add_argument("--student", action="append", metavar="ID", help="with --assignment: regrade only this student (repeatable)")
    grade.add_argument("--exercise", action="append", metavar="ID", help="with --assignment: regrade only this exercise (repeatable)")
    grade.set_defaults(run=_runner("autograd_lab.grading"))
    return parser


def main(argv=None):
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.jupyter_args = rest  # `lab` hands them to JupyterLab
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

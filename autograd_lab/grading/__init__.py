"""``autograd-lab grade``: grade student notebooks in batch, without trusting them.

Each submission runs in a fresh kernel in a bubblewrap sandbox on a private copy; the grader
then calls the student's answers itself on public and hidden inputs, loads what
came back as plain data, and judges it against the reference in its own
process.  See ``docs/grading.md`` for the instructor's guide.

Modules, one idea each: ``submissions`` (finding and reading files), ``sandbox``,
``launcher`` and ``watchdog`` (the kernel's sandbox and limits), ``kernel`` (driving one kernel),
``execute`` and ``harvest`` (running a notebook, collecting answers), ``worker``
(one submission in its own process), ``scoring`` (judging), ``reports`` (files
written), ``progress`` (the bar), ``batch`` (all of it, in parallel).
"""

import sys

__all__ = ["main"]


def main(args):
    """Entry point of ``autograd-lab grade`` (``args`` from ``cli.build_parser``)."""
    # Imported here: the worker processes import this package and must not pay for torch.
    from .batch import Options, grade_batch
    from .submissions import UsageError

    options = Options(
        out=args.out, jobs=args.jobs, cell_timeout=args.cell_timeout, progress=not args.no_progress,
        check_timeout=args.check_timeout, submission_timeout=args.submission_timeout,
        notebooks=tuple(args.notebook or ()), memory_mb=args.memory_mb,
        kernel_python=args.kernel_python or sys.executable,
        allow_unsandboxed=getattr(args, "allow_unsandboxed", False),
    )
    if options.jobs < 1 or options.cell_timeout <= 0:
        print("autograd-lab grade: --jobs must be at least 1 and --cell-timeout positive.", file=sys.stderr)
        return 2
    if getattr(args, "assignment", None):
        return _grade_assignment(args, options)
    if getattr(args, "student", None) or getattr(args, "exercise", None):
        print("autograd-lab grade: --student and --exercise regrade part of an assignment: give --assignment FILE "
              "too (plain mode grades every file given).", file=sys.stderr)
        return 2
    try:
        graded = grade_batch(args.submissions, options)
    except UsageError as error:
        print(f"autograd-lab grade: {error}", file=sys.stderr)
        return 2
    from .feedback import problems as problems_of  # cells that raised or timed out count too
    problems = sum(1 for report in graded if problems_of(report))
    print(f"Graded {len(graded)} submission(s) into {args.out} "
          f"({problems} with problems; see gradebook.csv and item_analysis.md).")
    return 0


def _grade_assignment(args, options):
    """``grade --assignment``: one row per student, merged into ``--out``'s gradebook (``gradebook.main``)."""
    from . import gradebook
    from .submissions import UsageError

    try:
        return gradebook.main(args, options)
    except UsageError as error:
        print(f"autograd-lab grade: {error}", file=sys.stderr)
        return 2

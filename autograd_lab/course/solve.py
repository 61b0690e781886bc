"""``autograd-lab solve NOTEBOOKS... --out DIR``: copies of the notebooks, every exercise solved.

Each exercise cell (tag ``exercise``, metadata ``{"autograd_lab": {"exercise": id}}``)
gets the reference solution of its exercise; outputs are stripped.  ``make test``
runs the copies in strict mode, which proves every exercise solvable from its own
notebook.  The input notebooks are only read.  Every problem in every notebook
is reported before anything is written, and then nothing is written.
"""

import sys
from pathlib import Path

import nbformat

from autograd_lab.checking.source import solution_source
from autograd_lab.checking import get

EXERCISE_TAG = "exercise"


class SolveError(Exception):
    """A notebook cannot be solved; the message says which cell and what to do."""


def exercise_id_of(cell):
    """The exercise id a cell is marked with, or ``None`` for an ordinary cell."""
    marked = (cell.get("metadata", {}).get("autograd_lab") or {}).get("exercise")
    tagged = EXERCISE_TAG in cell.get("metadata", {}).get("tags", [])
    if tagged and not marked:
        raise SolveError("it is tagged 'exercise' but has no metadata "
                         '{"autograd_lab": {"exercise": "NN.name"}}; add the exercise id.')
    return marked


def solved_notebook(path):
    """The notebook at ``path`` with every exercise cell solved and every output stripped."""
    notebook = nbformat.read(str(path), as_version=4)
    problems, seen = [], {}
    for number, cell in enumerate(notebook.cells, start=1):
        _strip_outputs(cell)
        try:
            exercise_id = exercise_id_of(cell)
            if exercise_id is None:
                continue
            if exercise_id in seen:
                raise SolveError(f"exercise {exercise_id!r} is already marked in cell {seen[exercise_id]}; "
                                 "each exercise has exactly one exercise cell.")
            seen[exercise_id] = number
            cell.source = _solution_for(exercise_id)
        except SolveError as problem:
            problems.append(f"{path}, cell {number}: {problem}")
    return notebook, problems


def _solution_for(exercise_id):
    try:
        exercise = get(exercise_id)
    except KeyError:
        raise SolveError(f"exercise {exercise_id!r} is not registered. Define it in "
                         "autograd_lab_solutions/nbNN_*.py, or fix the id in the cell's metadata.") from None
    try:
        source = solution_source(exercise)
        compile(source, f"<solution of {exercise_id}>", "exec")
    except (ValueError, SyntaxError) as error:
        raise SolveError(str(error)) from None
    return source.rstrip("\n")


def _strip_outputs(cell):
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None


def notebook_paths(inputs):
    """``(notebook, path relative to the output folder)`` for files and folders of notebooks."""
    found = []
    for item in map(Path, inputs):
        if item.is_dir():
            for path in sorted(item.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in path.parts:
                    found.append((path, path.relative_to(item)))
        elif item.is_file() and item.suffix == ".ipynb":
            found.append((item, Path(item.name)))
        else:
            raise SolveError(f"{item} is neither a notebook (.ipynb) nor a folder of notebooks.")
    return found


def solve(inputs, out):
    """Write the solved copies into ``out``; return their paths.  Raises ``SolveError``."""
    out = Path(out)
    pairs = notebook_paths(inputs)
    if not pairs:
        raise SolveError(f"no notebooks found in {', '.join(map(str, inputs))}.")
    solved, problems = [], []
    for source, relative in pairs:
        target = out / relative
        if target.resolve() == source.resolve():
            problems.append(f"{source}: the copy would overwrite the notebook itself; choose another --out.")
            continue
        try:
            notebook, found = solved_notebook(source)
        except Exception as error:  # an unreadable notebook: report it with the others
            problems.append(f"{source}: cannot be read as a notebook ({type(error).__name__}: {error}).")
            continue
        problems += found
        solved.append((target, notebook))
    if problems:
        raise SolveError("\n".join(problems))
    for target, notebook in solved:
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, str(target))
    return [target for target, _ in solved]


def main(args):
    try:
        written = solve(args.notebooks, args.out)
    except SolveError as error:
        print(f"autograd-lab solve: nothing written.\n{error}", file=sys.stderr)
        return 1
    print(f"autograd-lab solve: wrote {len(written)} solved notebook(s) to {args.out}")
    return 0

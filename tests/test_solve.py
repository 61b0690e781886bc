"""``autograd-lab solve``: solved, output-free copies; the inputs are never touched."""

import argparse
import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograd_lab.course.solve import SolveError, main, solve

IMPORTS = "import torch\nfrom autograd_lab import check, hint, solution"


def exercise_cell(exercise_id, source):
    cell = new_code_cell(source, metadata={"tags": ["exercise"], "autograd_lab": {"exercise": exercise_id}})
    cell.outputs = [new_output("stream", name="stdout", text="left over\n")]
    cell.execution_count = 7
    return cell


def warm_up_notebook():
    return new_notebook(cells=[
        new_markdown_cell("## Exercises"),
        new_code_cell(IMPORTS),
        exercise_cell("00.needs_grad", "needs_grad = ...  # YOUR ANSWER HERE"),
        new_code_cell('result = check("00.needs_grad", needs_grad)\nprint(result.status)'),
        exercise_cell("00.cube_grad", "def cube_grad(x):\n    # YOUR CODE HERE\n    raise NotImplementedError"),
        new_code_cell('result = check("00.cube_grad", cube_grad)\nprint(result.status)'),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def write(path, notebook):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
    return path


def test_exercise_cells_get_the_reference_and_outputs_are_stripped(tmp_path):
    source = write(tmp_path / "in" / "00_warm.ipynb", warm_up_notebook())
    before = source.read_bytes()
    [target] = solve([str(source)], tmp_path / "out")
    assert target == tmp_path / "out" / "00_warm.ipynb"
    assert source.read_bytes() == before
    cells = nbformat.read(str(target), as_version=4).cells
    assert cells[2].source == 'needs_grad = {"w": True, "x": False, "b": True, "h": False}'
    assert cells[4].source.startswith("def cube_grad(x):") and "backward()" in cells[4].source
    assert all(c.outputs == [] and c.execution_count is None for c in cells if c.cell_type == "code")
    assert cells[3].source == warm_up_notebook().cells[3].source  # other cells untouched


def test_folders_are_searched_recursively_without_checkpoints(tmp_path):
    write(tmp_path / "in" / "a.ipynb", warm_up_notebook())
    write(tmp_path / "in" / "part" / "b.ipynb", warm_up_notebook())
    write(tmp_path / "in" / ".ipynb_checkpoints" / "a-checkpoint.ipynb", warm_up_notebook())
    written = solve([str(tmp_path / "in")], tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == ["a.ipynb", "part/b.ipynb"]


def _broken(cell):
    notebook = warm_up_notebook()
    notebook.cells.append(cell)
    return notebook


@pytest.mark.parametrize("cell,message", [
    (exercise_cell("00.no_such_thing", "x = 1"), "cell 7: exercise '00.no_such_thing' is not registered"),
    (new_code_cell("x = 1", metadata={"tags": ["exercise"]}), "cell 7: it is tagged 'exercise' but has no metadata"),
    (exercise_cell("00.cube_grad", "def cube_grad(x): ..."), "already marked in cell 5"),
])
def test_problems_are_reported_and_nothing_is_written(tmp_path, cell, message):
    good = write(tmp_path / "in" / "good.ipynb", warm_up_notebook())
    bad = write(tmp_path / "in" / "bad.ipynb", _broken(cell))
    with pytest.raises(SolveError, match=message):
        solve([str(good), str(bad)], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_main_explains_the_failure_on_stderr(tmp_path, capsys):
    bad = write(tmp_path / "bad.ipynb", _broken(exercise_cell("00.no_such_thing", "x = 1")))
    assert main(argparse.Namespace(notebooks=[str(bad)], out=str(tmp_path / "out"))) == 1
    err = capsys.readouterr().err
    assert "nothing written" in err and "00.no_such_thing" in err and "autograd_lab_solutions" in err


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(SolveError, match="neither a notebook"):
        solve([str(tmp_path / "missing.ipynb")], tmp_path / "out")
    (tmp_path / "broken.ipynb").write_text("{not json")
    with pytest.raises(SolveError, match="cannot be read as a notebook"):
        solve([str(tmp_path / "broken.ipynb")], tmp_path / "out")
    source = write(tmp_path / "same" / "x.ipynb", warm_up_notebook())
    with pytest.raises(SolveError, match="overwrite the notebook itself"):
        solve([str(source)], tmp_path / "same")


def _run(path, **env):
    notebook = nbformat.read(str(path), as_version=4)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    return [("".join(o.get("text", "") for o in c.outputs)).strip() for c in notebook.cells if c.cell_type == "code"]


def test_the_shipped_copy_runs_in_ci_and_the_solved_copy_passes_in_strict_mode(tmp_path):
    shipped = write(tmp_path / "in" / "00_warm.ipynb", warm_up_notebook())
    [solved] = solve([str(shipped)], tmp_path / "out")
    assert _run(shipped, CI="true")[2::2] == ["not attempted", "not attempted"]
    assert _run(solved, AUTOGRAD_LAB_STRICT="1")[2::2] == ["passed", "passed"]

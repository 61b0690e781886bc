"""Committed notebooks are clean, valid, runnable by the venv's kernel and follow the course structure."""

import re
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
COURSE = [
    "00_start_here", "01_dynamic_graph", "02_vjp_scalar_loss", "03_accumulation",
    "04_detach_clone_inplace", "05_amp", "06_checkpointing", "07_debugging",
    "08_distributed_gradients",
]
SECTIONS = ["Goals", "Concept", "Predict, then run", "Measured demonstration", "Pitfalls", "Exercises", "Summary"]
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def load(path):
    return nbformat.read(path, as_version=4)


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_the_course_notebooks_all_exist():
    assert [p.stem for p in NOTEBOOKS] == COURSE


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_valid_and_committed_without_outputs(path):
    notebook = load(path)
    nbformat.validate(notebook)
    for cell in code_cells(notebook):
        assert cell.outputs == [], f"{path.name}: a cell has outputs"
        assert cell.execution_count is None, f"{path.name}: a cell has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_kernel_spec_resolves(path):
    name = load(path).metadata.kernelspec.name
    spec = KernelSpecManager().get_kernel_spec(name)  # raises NoSuchKernel when it does not resolve
    assert spec.language == "python"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_seeded_in_the_first_code_cell(path):
    first = code_cells(load(path))[0].source
    assert re.search(r"\bseed\(", first), f"{path.name}: the first code cell does not seed"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_sections_appear_in_the_common_order(path):
    headings = [line[3:].strip() for cell in load(path).cells if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if line.startswith("## ")]
    positions = []
    for section in SECTIONS:
        found = [i for i, h in enumerate(headings) if h == section or h.startswith(section + ":")]
        assert found, f"{path.name}: no '## {section}' heading"
        positions.append(found[0])
    assert positions == sorted(positions), f"{path.name}: sections out of order: {headings}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_cells_name_registered_exercises(path):
    from autograd_lab.checking import get

    marked = [cell for cell in load(path).cells if "exercise" in cell.metadata.get("tags", [])]
    assert marked, f"{path.name}: no exercise cells"
    for cell in marked:
        exercise = get(cell.metadata["autograd_lab"]["exercise"])
        assert exercise.answer_name in cell.source


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for stem in COURSE:
        assert f"{stem}.ipynb" in readme, stem

"""Definitions taken from a notebook, so an answer key is measured on the very code the prompt shows.

Only top-level imports, functions and assignments are run: no cell's printing,
plotting or checking.  This lives with the solutions: student builds never need it.
"""

import ast
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign)


def notebook_definitions(stem):
    """A namespace with every top-level definition of ``notebooks/<stem>.ipynb``'s code cells, in order."""
    # Imported here, not at the top: the grader loads every solutions module in each
    # submission's worker process, and nbformat (with jsonschema) costs it 1 to 2.6 s.
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    namespace = {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:          # a cell with IPython magics defines nothing we need
            continue
        for node in tree.body:
            if isinstance(node, _DEFINITIONS):
                _run(node, stem, namespace)
    return namespace


def _run(node, stem, namespace):
    code = compile(ast.Module(body=[node], type_ignores=[]), f"{stem}.ipynb", "exec")
    if not isinstance(node, ast.Assign):
        exec(code, namespace)
        return
    try:
        exec(code, namespace)
    except Exception:
        # A demo's result (``store["relu"]`` after a loop we did not run) is not a
        # definition: the experiments need the functions and constants, not demo values.
        pass

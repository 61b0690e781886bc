import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def run_nbval(folder):
    # Inside the repository, so the root conftest.py applies as it does for the labs.
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "-q", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_cell_that_writes_to_stderr_fails_and_a_clean_one_passes():
    folder = ROOT / "build" / "stderr-check"
    folder.mkdir(parents=True, exist_ok=True)
    cells = [new_code_cell("print('fine')"),
             new_code_cell("import warnings\nwarnings.warn('left on stderr')")]
    nbformat.write(new_notebook(cells=cells, metadata=KERNEL), folder / "noisy.ipynb")
    try:
        result = run_nbval(folder)
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed" in result.stdout
    assert "wrote to stderr" in result.stdout and "left on stderr" in result.stdout

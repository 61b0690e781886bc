"""The package's rooms (docs/architecture.md): layering, no import circles, no solutions in a wheel, old paths."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("checking", "course", "grading", "labs", "viz")

# Every import line of the notebooks as they were before the rooms (commit 397ff6f): a
# student's work/ copy made then must still import (autograd_lab/_moved.py).
OLD_NOTEBOOK_IMPORTS = """
from autograd_lab import check, diff, draw, expect_error, expect_warning, hint, solution, trace_backward, versions
from autograd_lab import ddp_scenarios as scenarios
from autograd_lab import gpu_records, versions
from autograd_lab import tiny_engine
from autograd_lab.amp_timing import gpu_precision_table, measure_precision
from autograd_lab.ddp_scenarios import make_data, make_model, rank_slice
from autograd_lab.distributed import RankError, launch, nccl_default_timeout
from autograd_lab.doctor import format_findings, run_checks
from autograd_lab.grad_report import audit_step, format_report, grad_report, optimizer_coverage, track_update
from autograd_lab.memory import memory_breakdown, saved_tensors
from autograd_lab.precision import cast_fate, smallest_subnormal
from autograd_lab.recompute import activations_kept, measure_segments, predicted_saved
from autograd_lab.timing import time_it
from autograd_lab.tiny_engine import Value
import autograd_lab as lab
"""


def test_import_contracts_hold():
    """Layers course > grading > checking > labs | viz > versions, no circle in any room, no solutions import."""
    lint_imports = Path(sys.executable).with_name("lint-imports")  # import-linter's own command
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "0 broken" in result.stdout, result.stdout + result.stderr


def test_each_room_and_module_opens_with_a_one_line_docstring():
    import ast

    for room in ROOMS:
        assert (ROOT / "autograd_lab" / room / "__init__.py").is_file(), room
    for path in sorted((ROOT / "autograd_lab").rglob("*.py")) + sorted((ROOT / "autograd_lab_solutions").glob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        assert docstring and docstring.splitlines()[0].strip(), f"{path.relative_to(ROOT)} has no docstring"


def test_the_public_names_still_come_from_the_top():
    code = ("from autograd_lab import check, diff, draw, expect_error, expect_warning, hint, memory_breakdown, "
            "pick_device, saved_tensors, seed, solution, trace_backward, versions; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_old_import_paths_of_a_students_copy_still_work():
    code = OLD_NOTEBOOK_IMPORTS + (
        "\nimport autograd_lab.labs.memory as new\nimport autograd_lab.memory as old\n"
        "assert old is new, 'one module under two names, not two copies'\nprint('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_a_wheel_built_from_pyproject_carries_no_solution(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "--quiet", "-w", str(tmp_path), str(ROOT)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    [wheel] = tmp_path.glob("autograd_lab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.startswith("autograd_lab/checking/") for name in names), names[:20]
    assert "autograd_lab/course/site_template/autograd_lab_site/index.html.j2" in names
    records = sorted((ROOT / "autograd_lab" / "labs" / "gpu_data").glob("*.json"))   # package data, as in a release
    assert records and all(f"autograd_lab/labs/gpu_data/{path.name}" in names for path in records), names
    leaked = [name for name in names if "solution" in name.split("/")[0] or "/solutions/" in name
              or name.startswith("autograd_lab_solutions")]
    assert not leaked, leaked
    banks = [name for name in names if name.endswith(".py") and b"wrong_answers=" in zipfile.ZipFile(wheel).read(name)]
    assert not banks, f"exercise definitions with their wrong-answer banks in the wheel: {banks}"


@pytest.mark.parametrize("room", ROOMS)
def test_architecture_page_names_every_room(room):
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert f"autograd_lab/{room}/" in page, room

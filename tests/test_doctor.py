import subprocess
import sys

from autograd_lab.course import doctor
from autograd_lab.course.cli import main


def test_doctor_passes_on_the_course_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("python", "torch", "jupyterlab", "nbval", "graphviz dot", "cuda", "cpu amp"):
        assert name in out
    assert "Ready for the course." in out


def test_missing_dot_is_a_required_problem_with_a_fix(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    finding = doctor.check_dot()
    assert not finding.ok and finding.required
    assert "graphviz" in finding.fix and "install" in finding.fix


def test_exit_status_is_non_zero_when_something_required_fails(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "check_dot",
                        lambda: doctor.Finding("graphviz dot", False, "not found", fix="install it"))
    assert doctor.main() == 1
    out = capsys.readouterr().out
    assert "XX  graphviz dot" in out and "fix: install it" in out
    assert "1 problem(s) to fix" in out


def test_missing_gpu_is_information_not_a_failure():
    finding = doctor.check_cuda()
    assert not finding.required


def test_missing_package_names_the_fix(monkeypatch):
    finding = doctor.check_package("surely-not-installed-package", "Something")
    assert not finding.ok and "make setup" in finding.fix


def test_console_script_runs_doctor():
    result = subprocess.run([sys.executable, "-m", "autograd_lab.course.cli", "doctor"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_torch_outside_the_tested_range_is_a_problem_with_the_exact_fix(monkeypatch):
    monkeypatch.setattr(doctor, "_version", lambda name: "2.4.1" if name == "torch" else "1.0")
    finding = doctor.check_torch_range()
    assert not finding.ok and finding.required
    assert "outside the tested range >=2.5,<2.16" in finding.detail
    assert 'pip install "torch>=2.5,<2.16"' in finding.fix and "torch==2.13.0" in finding.fix


def test_torch_inside_the_tested_range_passes(monkeypatch):
    monkeypatch.setattr(doctor, "_version", lambda name: "2.15.0+cu128")
    assert doctor.check_torch_range().ok


def test_the_quick_doctor_of_make_lab_imports_no_torch():
    # `make lab` runs it before every start: importing torch cost 10-40 s on a 2-core laptop.
    code = ("import sys; from autograd_lab.course.cli import main; status = main(['doctor', '--quick']); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(status)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("doctor --quick: ready (Python ") and "torch 2." in result.stdout


def test_the_quick_doctor_shows_every_finding_when_something_is_wrong(monkeypatch, capsys):
    from types import SimpleNamespace

    monkeypatch.setattr(doctor, "check_dot", lambda: doctor.Finding("graphviz dot", False, "not found", fix="install it"))
    assert doctor.main(SimpleNamespace(quick=True)) == 1
    out = capsys.readouterr().out
    assert "XX  graphviz dot" in out and "fix: install it" in out and "cuda" not in out

import importlib.util
import subprocess
import sys
import threading
from types import SimpleNamespace

from autograd_lab.course import doctor
from autograd_lab.course.cli import main


def test_doctor_passes_on_the_course_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("python", "torch", "jupyterlab", "nbval", "graphviz dot", "cuda", "cpu amp", "kernel files"):
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


def test_a_kernel_installed_outside_the_site_folders_is_a_problem_with_the_fix(monkeypatch, tmp_path):
    # On a GPU machine the kernel was carried in with `pip install --target`: every exercise check that
    # observes the method failed, correct answers too, naming the kernel's threads (IOPub, Heartbeat, ...).
    real = importlib.util.find_spec
    carried = str(tmp_path / "site" / "ipykernel" / "__init__.py")
    monkeypatch.setattr(doctor.importlib.util, "find_spec",
                        lambda name: SimpleNamespace(origin=carried) if name == "ipykernel" else real(name))
    finding = doctor.check_kernel_files()
    assert not finding.ok and finding.required
    assert finding.detail == f"outside this Python's own site folders: ipykernel in {tmp_path / 'site'}"
    assert "virtual environment" in finding.fix and "--target" in finding.fix


def test_the_full_doctor_checks_where_the_kernel_is_and_the_quick_one_does_not(monkeypatch):
    monkeypatch.setattr(doctor, "check_dot", lambda: doctor.Finding("graphviz dot", True, "dot"))
    assert "kernel files" in [f.name for f in doctor.run_checks()]
    assert "kernel files" not in [f.name for f in doctor.run_checks(quick=True)]


def test_the_checks_take_a_thread_running_code_outside_the_site_folders_for_the_notebooks(tmp_path):
    # Why the doctor's finding is a problem: the tape's rule, on a thread like the kernel's heartbeat.
    from autograd_lab.checking import tape

    source = tmp_path / "kernel_like.py"
    source.write_text("import threading\nready, stop = threading.Event(), threading.Event()\n\n"
                      "def run():\n    ready.set()\n    stop.wait(60)\n")
    spec = importlib.util.spec_from_file_location("kernel_like", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    thread = threading.Thread(target=module.run, name="Heartbeat", daemon=True)
    thread.start()
    module.ready.wait(60)    # inside run(), not still in threading's start-up
    try:
        assert not tape.is_library_file(str(source)) and tape.is_library_file(threading.__file__)
        assert "thread 'Heartbeat' (running run)" in tape._threads_at_work()
    finally:
        module.stop.set()
        thread.join()


def test_the_doctor_requires_what_the_student_build_installs_and_no_test_tool(monkeypatch, capsys):
    # Audit 00-r6 item 4: the doctor counted nbval as required, the student build's requirements.txt
    # lacks it (a test tool), and the fix it gave (`make setup`) does not exist there.
    from autograd_lab.grading import release

    checked = {f.name: f.required for f in doctor.run_checks(quick=True)}
    required = {name for name in checked if checked[name]} & ({"torch"} | set(doctor.STUDENT_PACKAGES))
    assert required == {"torch", *doctor.STUDENT_PACKAGES} and checked["nbval"] is False
    student = {line.split("==")[0] for line in release.student_requirements().splitlines()}
    assert required <= student, required - student
    assert "nbval" not in student
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda name: None if name == "nbval" else real(name))
    monkeypatch.setattr(doctor, "check_dot", lambda: doctor.Finding("graphviz dot", True, "dot"))
    assert doctor.main() == 0      # a student without nbval is ready
    out = capsys.readouterr().out
    assert "--  nbval          not installed" in out and "Ready for the course." in out


def test_a_missing_package_in_a_student_build_names_its_requirements_txt(monkeypatch):
    monkeypatch.setattr(doctor, "in_repository", lambda: False)
    finding = doctor.check_package("surely-not-installed-package", "Something")
    assert "pip install -r requirements.txt" in finding.fix and "make setup" not in finding.fix

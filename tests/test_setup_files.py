"""The three ways to install the course must agree, and CI must run what the README says."""

import configparser
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TEST_ONLY = {"pytest", "pytest-xdist", "pyyaml", "playwright", "import-linter"}


def requirement_name(spec):
    return re.split(r"[<>=!~\[ ;]", spec.strip(), maxsplit=1)[0].lower()


def course_pins():
    lines = (ROOT / "requirements" / "course.txt").read_text().splitlines()
    specs = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return {requirement_name(spec): spec for spec in specs}


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def conda_environment():
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def conda_pip_section():
    deps = conda_environment()["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def test_every_course_pin_is_exact():
    for name, spec in course_pins().items():
        assert "==" in spec, f"{spec} in requirements/course.txt is not pinned"
    assert course_pins()["torch"] == "torch==2.13.0"


def test_pyproject_and_course_pins_name_the_same_packages():
    project = pyproject()["project"]
    library = {requirement_name(s) for s in project["dependencies"]}
    test_extra = {requirement_name(s) for s in project["optional-dependencies"]["test"]}
    assert library | test_extra == set(course_pins())
    assert test_extra == TEST_ONLY


def test_pyproject_gives_ranges_and_the_fixed_names():
    project = pyproject()["project"]
    assert project["name"] == "autograd-lab"
    assert project["requires-python"] == ">=3.10"
    assert any(dep.startswith("torch>=2.5,<2.16") for dep in project["dependencies"])
    assert project["scripts"]["autograd-lab"] == "autograd_lab.course.cli:main"


def test_conda_environment_matches_the_pip_path():
    pip_section = conda_pip_section()
    assert "-e ." in pip_section
    conda_pins = {requirement_name(s): s for s in pip_section if s != "-e ."}
    assert conda_pins == course_pins()


def test_conda_environment_brings_the_dot_binary():
    deps = conda_environment()["dependencies"]
    assert "conda-forge" in conda_environment()["channels"]
    assert "graphviz" in deps  # conda-forge's graphviz is the binary, not the Python wrapper
    assert any(str(d).startswith("python") for d in deps)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", ci, re.MULTILINE)


def test_makefile_has_the_documented_targets():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("setup", "lab", "test", "site", "doctor"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target


def test_nbval_sanitize_file_is_well_formed():
    # nbval silently ignores a malformed sanitize file, so parse it ourselves.
    parser = configparser.ConfigParser()
    parser.read(ROOT / "tests" / "nbval_sanitize.cfg")
    assert parser.sections(), "no sections parsed"
    rules = [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]

    def sanitize(text):
        for pattern, replacement in rules:
            text = pattern.sub(replacement, text)
        return text

    assert sanitize("<MulBackward0 object at 0x7f12ab34cd56>") == "<MulBackward0 object at 0xADDRESS>"
    assert sanitize('File /tmp/ipykernel_4242/123456.py:3') == "File IPYKERNEL_CELL:3"


def test_ensure_dot_stops_with_instructions_when_it_cannot_install(tmp_path):
    # A PATH with the shell's basic tools but no dot, apt-get or brew: nothing to
    # install with, so the script must stop and say exactly how to get graphviz.
    import shutil
    import subprocess

    for tool in ("bash", "uname", "id", "cat"):
        (tmp_path / tool).symlink_to(shutil.which(tool))
    result = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-dot")], capture_output=True,
                            text=True, env={"PATH": str(tmp_path)}, timeout=60)
    assert result.returncode == 1
    assert "graphviz 'dot' binary is missing" in result.stderr
    for fix in ("sudo apt-get install graphviz", "brew install graphviz", "conda install -c conda-forge graphviz"):
        assert fix in result.stderr


def test_ensure_dot_is_quiet_and_quick_when_dot_exists():
    import subprocess

    result = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-dot")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""


def test_make_test_browser_reuses_a_site_that_is_up_to_date(tmp_path):
    # The executed notebooks and the site are file targets: run again when a notebook or the
    # package changed, not every time.
    import os
    import shutil
    import subprocess
    import time

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    files = ["pyproject.toml", "requirements/course.txt", "notebooks/01_a.ipynb", "autograd_lab/viz/graph.py",
             "autograd_lab_solutions/nb01_a.py", ".venv/.installed", "build/executed/.ran", "build/site/.built"]
    old = time.time() - 100
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (old, old))
        old += 10  # in this order: the stamp after the set-up files, the site last
    plan = lambda: subprocess.run(["make", "-n", "test-browser"], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60).stdout
    assert "autograd_lab.course" not in plan()
    for changed in ("notebooks/01_a.ipynb", "autograd_lab/viz/graph.py"):
        os.utime(tmp_path / changed)  # now: newer than the executed copies and the site
        assert "autograd_lab.course.executed" in plan() and "autograd_lab.course.site" in plan(), changed
        for stamp in ("build/executed/.ran", "build/site/.built"):
            os.utime(tmp_path / stamp)
        assert "autograd_lab.course" not in plan()


def test_setup_says_what_it_does_step_by_step():
    # A first `make lab` takes minutes: each step prints a line first, and pip shows its progress.
    recipe = (ROOT / "Makefile").read_text().split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    steps = re.findall(r'\[setup (\d)/(\d)\]', recipe)
    assert [int(k) for k, _ in steps] == list(range(1, len(steps) + 1)) and {n for _, n in steps} == {str(len(steps))}
    big_install = next(line for line in recipe.splitlines() if "-r requirements/course.txt" in line)
    assert "--quiet" not in big_install and "--progress-bar on" in big_install


def _oldest_python():
    """The oldest Python the docs name (3.10, Gradescope's image), from PATH or pyenv."""
    found = shutil.which("python3.10")
    pyenv = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.10.*/bin/python3.10"))
    for candidate in ([found] if found else []) + [str(p) for p in pyenv]:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(_oldest_python() is None, reason="no Python 3.10 on this machine")
def test_the_grader_starts_on_the_oldest_python_the_docs_name(tmp_path):
    """Every module compiles under 3.10 and the command line starts there without the course's pins.

    The whole autograder on 3.10 (torch, a kernel, a graded notebook) is the opt-in
    ``test_the_zip_in_a_simulated_gradescope_image``: it needs a 5 GB torch build.
    """
    python = _oldest_python()
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path), "PYTHONPATH": str(ROOT)}
    compiled = subprocess.run([python, "-m", "compileall", "-q", "autograd_lab", "autograd_lab_solutions"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    started = subprocess.run([python, "-m", "autograd_lab.course.cli", "grade", "--help"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert started.returncode == 0 and "--assignment" in started.stdout, started.stderr

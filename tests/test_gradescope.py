"""The Gradescope autograder zip, run as Gradescope would, for zero, one, several and wrong uploads.

Three levels, from fast to faithful:

* in-process: ``gradescope.run`` on a temporary ``/autograder`` with a stand-in
  grader, for what depends on Gradescope's metadata (due dates, extensions, the
  student, visibility) and for a grader that fails;
* the unpacked zip's ``run_autograder``, run with bash under a temporary
  ``AUTOGRADER_ROOT`` with real kernels (bubblewrap here: this machine's Python
  lives under ``/root``, which the container kind's unprivileged uid cannot run);
* ``test_the_zip_in_a_simulated_gradescope_image``, opt-in
  (``AUTOGRAD_LAB_GRADESCOPE_PYTHON=/path/to/python3.10``, as root): Gradescope's
  image rebuilt as closely as this machine allows (see its docstring).

Every ``results.json`` is validated against Gradescope's spec.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_notebook

from autograd_lab.grading import assignment, gradebook, gradescope, release

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = """
name: HW0
notebooks:
  - {notebook: "00"}
  - {notebook: "01", points: 8}
due: 2026-11-20T23:59:00Z
late: {policy: percent_per_day, percent: 10}
"""
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
TEST_FIELDS = {"name", "number", "score", "max_score", "status", "output", "output_format", "visibility", "tags"}
CUBE = "def cube_grad(x):\n    x = x.detach().requires_grad_()\n    (x ** 3).sum().backward()\n    return x.grad"
NEEDS = 'needs_grad = {"w": True, "x": False, "b": True, "h": False}'


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "release.key"
    previous = os.environ.get(release.KEY_ENV)
    os.environ[release.KEY_ENV] = str(path)
    release.release_key()
    yield path
    os.environ.pop(release.KEY_ENV) if previous is None else os.environ.__setitem__(release.KEY_ENV, previous)


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory, key):
    folder = tmp_path_factory.mktemp("zip")
    (folder / "hw0.yml").write_text(ASSIGNMENT)
    return Path(gradescope.build_zip(folder / "hw0.yml", folder / "autograder.zip"))


def _notebook(number, answers):
    cells = [new_code_cell("import torch")]
    for exercise in gradebook.notebook_exercises(number):
        source = answers.get(exercise.id) or (f"{exercise.answer_name} = ..." if exercise.kind == "value"
                                              else f"def {exercise.answer_name}(*a):\n    raise NotImplementedError")
        cells.append(new_code_cell(source, metadata={"autograd_lab": {"exercise": exercise.id}}))
    return nbformat.writes(new_notebook(cells=cells))


def _validate(results):
    """Every field Gradescope reads, with its type and allowed values."""
    assert isinstance(results["score"], (int, float)) and results["score"] >= 0
    assert isinstance(results["execution_time"], int) and results["execution_time"] >= 0
    assert isinstance(results["output"], str) and results["output"].strip()
    assert results["output_format"] in FORMATS
    assert results["visibility"] in VISIBILITIES and results["stdout_visibility"] in VISIBILITIES
    numbers = [test["number"] for test in results["tests"]]
    assert len(numbers) == len(set(numbers))
    for test in results["tests"]:
        assert set(test) == TEST_FIELDS, test
        assert isinstance(test["name"], str) and test["name"] and isinstance(test["number"], str)
        assert 0 <= test["score"] <= test["max_score"] + 1e-9
        assert test["status"] in ("passed", "failed")
        assert isinstance(test["output"], str) and test["output_format"] in FORMATS
        assert test["visibility"] in VISIBILITIES and all(isinstance(t, str) for t in test["tags"])
    assert abs(results["score"] - sum(t["score"] for t in results["tests"])) < 0.01
    return results


def _unpack(autograder_zip, root):
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    (root / "submission").mkdir(parents=True)


def _run(autograder_zip, tmp_path, uploads, metadata=None):
    root = tmp_path / "autograder"
    _unpack(autograder_zip, root)
    for name, text in uploads.items():
        (root / "submission" / name).write_text(text)
    if metadata:
        (root / "submission_metadata.json").write_text(json.dumps(metadata))
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "AUTOGRADER_SANDBOX": "bubblewrap"}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return _validate(json.loads((root / "results" / "results.json").read_text())), done.stdout


# --- the zip ---------------------------------------------------------------------------------

def test_the_zip_holds_setup_run_autograder_pins_and_the_key(autograder_zip, key, tmp_path):
    with zipfile.ZipFile(autograder_zip) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        pins = archive.read("requirements.txt").decode()
        setup = archive.read("setup.sh").decode()
        assert archive.read("release.key").decode().strip().encode() == release.release_key()
    assert {"setup.sh", "run_autograder", "assignment.yml", "requirements.txt", "release.key"} <= names
    assert "package/autograd_lab/grading/gradescope.py" in names and "package/pyproject.toml" in names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert pins == (ROOT / "requirements" / "autograder.txt").read_text()
    # The kernel's venv gets the requirements only: the course package (and solutions) stay root-only.
    assert "pip install --no-deps" not in setup and 'chmod -R go-rwx "$SOURCE"' in setup
    toml = tmp_path / "hw.toml"
    toml.write_text('name = "HW"\nnotebooks = [{notebook = "00"}]\ndue = 2026-11-20T23:59:00Z\n'
                    'gradescope = {visibility = "after_due_date"}\n')
    with zipfile.ZipFile(gradescope.build_zip(toml, tmp_path / "z.zip")) as archive:
        data = yaml.safe_load(archive.read("assignment.yml"))   # YAML: Python 3.10 has no TOML reader
    assert assignment.from_dict(data) == assignment.load(toml)


def test_the_pins_resolve_for_python_3_10(tmp_path):
    """Every pin and what it needs has a wheel for Gradescope's Python 3.10 (pip's resolver, asked for 3.10)."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--only-binary=:all:", "--python-version", "3.10", "--target", str(tmp_path / "t"),
                           "--report", str(tmp_path / "r.json"), "-r", str(ROOT / "requirements" / "autograder.txt")],
                          capture_output=True, text=True, timeout=600)
    if done.returncode and ("NewConnectionError" in done.stderr or "No matching distribution" in done.stderr
                            and "from versions: none" in done.stderr):
        pytest.skip("PyPI cannot be reached from here")
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = {item["metadata"]["name"].lower(): item["metadata"]["version"]
              for item in json.loads((tmp_path / "r.json").read_text())["install"]}
    assert chosen["numpy"] == "2.2.6" and chosen["torch"].startswith("2.13.0") and chosen["ipykernel"] == "7.3.0"


# --- in-process: Gradescope's metadata ----------------------------------------------------------

def _fake_grade(score_of=lambda exercise: exercise.points):
    """A stand-in for the batch grader: every exercise gets ``score_of(exercise)``."""
    def grade(folder, number, out):
        reports = {}
        for path in Path(folder).glob("*.ipynb"):
            grades = [{"exercise_id": e.id, "title": e.title, "status": "passed" if score_of(e) else "failed",
                       "score": float(score_of(e)), "max_score": float(e.points), "misconception": None,
                       "messages": []} for e in gradebook.notebook_exercises(number)]
            reports[path.stem] = {"student": path.stem, "exercises": grades, "status": "graded", "sha256": "",
                                  "problems": ["FLAG: identical file (same SHA-256) as someone"], "cells": []}
        return reports
    return grade


def _root(tmp_path, text=ASSIGNMENT, uploads=None, metadata=None):
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    (root / "source" / "assignment.yml").write_text(text)
    (root / "submission").mkdir()
    for name, notebook in ({"00_start_here.ipynb": _notebook("00", {})} if uploads is None else uploads).items():
        (root / "submission" / name).write_text(notebook)
    if metadata is not None:
        (root / "submission_metadata.json").write_text(json.dumps(metadata))
    return root


def _metadata(created, due="2026-11-20T15:59:00.000000-08:00", extension=None):
    user = {"email": "Sam@Example.edu", "id": 7, "name": "Sam One"}
    if extension:
        user["assignment"] = {"due_date": extension, "late_due_date": None, "release_date": None}
    return {"id": 1, "created_at": created, "assignment": {"due_date": due, "late_due_date": None, "title": "HW0",
                                                           "total_points": "10.0"},
            "users": [user], "previous_submissions": []}


def test_gradescope_due_dates_and_extensions_drive_the_late_policy(tmp_path, key):
    late_2_days = "2026-11-22T10:00:00.000000-08:00"
    plain = _validate(gradescope.run(_root(tmp_path / "a", metadata=_metadata(late_2_days)), grade=_fake_grade()))
    assert plain["score"] == pytest.approx(2 * 0.8) and "2 day(s) late" in plain["output"]
    extended = _validate(gradescope.run(
        _root(tmp_path / "b", metadata=_metadata(late_2_days, extension="2026-11-23T23:59:00.000000-08:00")),
        grade=_fake_grade()))
    assert extended["score"] == 2 and "day(s) late" not in extended["output"]
    assert "Due 2026-11-23T23:59:00-08:00 (Gradescope's due date for you" in extended["output"]
    own = _validate(gradescope.run(_root(tmp_path / "c", ASSIGNMENT + "gradescope: {due_date: assignment}\n",
                                         metadata=_metadata(late_2_days, extension="2026-11-29T00:00:00Z")),
                                   grade=_fake_grade()))
    assert own["score"] == pytest.approx(2 * 0.8)   # the assignment file's due date, by request


def test_the_student_is_gradescopes_and_visibility_is_the_instructors(tmp_path, key):
    text = ASSIGNMENT + ("gradescope: {visibility: after_due_date}\n"
                         "roster: [{id: s1, name: Sam One, email: sam@example.edu}]\n")
    results = _validate(gradescope.run(_root(tmp_path, text, metadata=_metadata("2026-11-19T10:00:00Z")),
                                       grade=_fake_grade()))
    assert "not on the roster" not in results["output"] and "identical file" not in json.dumps(results)
    assert results["visibility"] == "after_due_date" and results["stdout_visibility"] == "hidden"
    upload = results["tests"][0]
    assert upload["name"] == "upload" and upload["visibility"] == "visible" and upload["max_score"] == 0
    assert "Graded 00_start_here.ipynb as notebook 00" in upload["output"]
    assert {t["visibility"] for t in results["tests"][1:]} == {"after_due_date"}


def test_a_failing_grader_tells_the_student_nothing_of_ours(tmp_path, key, capsys):
    def broken(folder, number, out):
        raise RuntimeError("cannot open /autograder/source/package/autograd_lab_solutions/nb00_start_here.py")

    results = _validate(gradescope.run(_root(tmp_path), grade=broken))
    assert results["score"] == 0 and "tell your instructor (error " in results["output"]
    assert "autograd_lab_solutions" not in json.dumps(results) and "Traceback" not in json.dumps(results)
    assert "autograd_lab_solutions" in capsys.readouterr().out   # the instructor's log has the traceback


def test_a_link_in_the_upload_is_not_followed(tmp_path, key):
    root = _root(tmp_path, uploads={})
    (root / "submission" / "00_start_here.ipynb").symlink_to(root / "source" / "assignment.yml")
    results = _validate(gradescope.run(root, grade=_fake_grade()))
    assert results["score"] == 0 and "a link or not a regular file" in results["output"]


# --- the unpacked zip, run by bash ------------------------------------------------------------

def test_no_upload(autograder_zip, tmp_path):
    results, _ = _run(autograder_zip, tmp_path, {})
    assert results["score"] == 0 and "No file was uploaded" in results["output"]
    assert [t["max_score"] for t in results["tests"]] == [0, 2, 8]


def test_a_wrong_file(autograder_zip, tmp_path):
    results, _ = _run(autograder_zip, tmp_path, {"answers.py": "print('hi')", "05_amp.ipynb": _notebook("05", {}),
                                                 "broken.ipynb": "{not json"})
    assert results["score"] == 0
    assert "None of the uploaded files is a notebook of this assignment" in results["output"]
    assert "answers.py: not a notebook" in results["output"]
    assert "05_amp.ipynb: this is not a notebook of this assignment" in results["output"]
    assert "broken.ipynb: not a valid Jupyter notebook" in results["output"]


def test_one_notebook_and_several(autograder_zip, tmp_path):
    on_time = _metadata("2026-11-19T10:00:00Z")
    one, log = _run(autograder_zip, tmp_path / "one", {"00_start_here.ipynb": _notebook("00", {"00.cube_grad": CUBE})},
                    on_time)
    assert one["score"] == 1 and "Graded 00_start_here.ipynb as notebook 00: 1 / 10 points" in one["output"]
    assert "notebook 00: grading 1 file(s)" in log          # progress, in the instructor's log
    by_name = {t["name"].split(" ")[0]: t for t in one["tests"]}
    assert by_name["00.cube_grad"]["score"] == 1 and by_name["00.cube_grad"]["status"] == "passed"
    assert by_name["00.needs_grad"]["score"] == 0
    assert by_name["notebook"]["output"] == "Notebook 01 was not uploaded." and by_name["notebook"]["max_score"] == 8

    several, _ = _run(autograder_zip, tmp_path / "several", {
        "mine.ipynb": _notebook("00", {"00.cube_grad": CUBE, "00.needs_grad": NEEDS}),    # found by its cells
        "01_dynamic_graph.ipynb": _notebook("01", {"01.saved_bytes": "saved_bytes = 14336"}),
        "old_copy.ipynb": _notebook("00", {}),  # one upload, one time: the first in name order is graded
        "notes.txt": "scratch"}, on_time)
    # 00: 2 of 2; 01: 1 of its 4 points, scaled to 8 -> 2
    assert several["score"] == 4 and "4 / 10 points" in several["output"]
    assert "old_copy.ipynb: a second file for notebook 00; graded mine.ipynb only" in several["output"]
    assert "notes.txt: not a notebook" in several["output"]
    saved = next(t for t in several["tests"] if t["name"].startswith("01.saved_bytes"))
    assert (saved["score"], saved["max_score"]) == (2, 2)


def test_a_broken_autograder_still_writes_a_result(autograder_zip, tmp_path):
    root = tmp_path / "autograder"
    _unpack(autograder_zip, root)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": "/nonexistent/python"}
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, timeout=60)
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "could not start" in results["output"]
    assert stat.S_IMODE((root / "source").stat().st_mode) == 0o700    # root-only, whatever happens next


# --- the simulated Gradescope image ------------------------------------------------------------

IMAGE = Path(os.environ.get("AUTOGRAD_LAB_GRADESCOPE_IMAGE", "/var/cache/autograd-lab/gradescope-image"))
# Docker's default seccomp profile, as far as bubblewrap is concerned: no new namespaces, no mounts.
SECCOMP = textwrap.dedent("""\
    import errno, os, sys
    import seccomp
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in ("unshare", "setns", "mount", "umount2", "pivot_root"):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")   # glibc falls back to clone, as under Docker
    rules.load()
    os.execvp(sys.argv[1], sys.argv[1:])
    """)
HOSTILE = textwrap.dedent("""\
    import os
    seen = []
    for label, target in [("solutions", "ROOT/source/package/autograd_lab_solutions"), ("key", "ROOT/source/release.key"),
                          ("source", "ROOT/source"), ("results", "ROOT/results"),
                          ("metadata", "ROOT/submission_metadata.json")]:
        try:
            os.listdir(target) if os.path.isdir(target) else open(target).read()
            seen.append(f"{label}:READ")
        except OSError as error:
            seen.append(f"{label}:{type(error).__name__}")
    try:
        import autograd_lab_solutions
        seen.append("import:READ")
    except ImportError as error:
        seen.append(f"import:{type(error).__name__}")
    try:
        open("ROOT/results/results.json", "w").write('{"score": 1000}')
        seen.append("write:READ")
    except OSError as error:
        seen.append(f"write:{type(error).__name__}")
    raise RuntimeError("probe " + " ".join(seen))   # shows up in the student's own problems
    """)


def _image(python310):
    """A world-readable copy of the 3.10 interpreter (Ubuntu's /usr/bin/python3.10 stands in its place)."""
    interpreter = IMAGE / "python3.10"
    source = Path(python310).resolve().parents[1]
    stamp = IMAGE / "python3.10.from"
    if not stamp.exists() or stamp.read_text() != str(source):
        shutil.rmtree(interpreter, ignore_errors=True)
        IMAGE.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, interpreter, symlinks=True)
        binary = interpreter / "bin" / "python3.10"
        if shutil.which("patchelf"):   # pyenv's runpath names its own folder, which other users cannot enter
            subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", str(binary)], check=True)
        stamp.write_text(str(source))
    for folder in (IMAGE, *IMAGE.parents):
        if folder != Path("/"):
            folder.chmod(folder.stat().st_mode | 0o055)
    subprocess.run(["chmod", "-R", "a+rX", str(interpreter)], check=True)
    (IMAGE / "no_namespaces.py").write_text(SECCOMP)   # not seccomp.py: it would import itself
    return interpreter / "bin" / "python3.10"


def _in_container(*argv, env, timeout):
    """Run ``argv`` as root under the seccomp filter, with Gradescope's working folder."""
    return subprocess.run(["/usr/bin/python3", str(IMAGE / "no_namespaces.py"), *map(str, argv)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=env["AUTOGRADER_ROOT"])


@pytest.mark.skipif(not os.environ.get("AUTOGRAD_LAB_GRADESCOPE_PYTHON") or os.geteuid() != 0,
                    reason="opt-in (AUTOGRAD_LAB_GRADESCOPE_PYTHON=/path/to/python3.10, as root): builds a 3.10 "
                           "venv with the autograder's pins, several GB the first time")
def test_the_zip_in_a_simulated_gradescope_image(autograder_zip):
    """Gradescope's image as closely as this machine allows, and what differs.

    Faithful: Python 3.10 as the image's ``python3``; ``setup.sh`` and
    ``run_autograder`` run as root exactly as shipped (apt-get, venv, pip from
    PyPI, the release build, permissions); Gradescope's layout and metadata
    (``/autograder/{source,submission,results}``, ``submission_metadata.json``);
    Docker's seccomp denial of namespaces (a filter on unshare, setns, mount and
    namespace clones) around both, so bubblewrap cannot work; the kernel as an
    unprivileged uid.  Not faithful: Debian 12, not Ubuntu 22.04 (apt installs
    the same package names); the autograder lives under a temporary
    ``AUTOGRADER_ROOT``, not ``/autograder`` (``HOSTILE`` reads both); no Docker
    memory or CPU limits; PyPI's CUDA build of torch instead of the CPU index,
    which this machine cannot reach.
    """
    if shutil.which("patchelf") is None or subprocess.run(["/usr/bin/python3", "-c", "import seccomp"]).returncode:
        subprocess.run(["apt-get", "install", "-y", "-qq", "patchelf", "python3-seccomp"], check=True,
                       capture_output=True, timeout=600)
    python310 = _image(os.environ["AUTOGRAD_LAB_GRADESCOPE_PYTHON"])
    root = Path(tempfile.mkdtemp(prefix="gradescope-image-"))
    try:
        root.chmod(0o755)
        _unpack(autograder_zip, root)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
               "AUTOGRADER_ROOT": str(root), "AUTOGRADER_VENV": str(IMAGE / "venv"),
               "AUTOGRADER_BASE_PYTHON": str(python310), "AUTOGRADER_PIP_ARGS": "",
               "AUTOGRAD_LAB_CACHE": str(IMAGE / "cache"), "OMP_NUM_THREADS": "1"}
        assert _in_container("true", env=env, timeout=60).returncode == 0
        namespaces = _in_container("bwrap", "--unshare-all", "--ro-bind", "/", "/", "true", env=env, timeout=60)
        assert namespaces.returncode != 0 and "bwrap:" in namespaces.stderr, namespaces.stderr  # as under Docker
        built = _in_container("bash", root / "source" / "setup.sh", env=env, timeout=3000)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        venv = IMAGE / "venv" / "bin" / "python"
        version = subprocess.run([str(venv), "-c", "import sys, torch, numpy; print(sys.version_info[:2], numpy.__version__)"],
                                 capture_output=True, text=True, check=True, env=env).stdout
        assert version.startswith("(3, 10)"), version
        found = subprocess.run([str(venv), "-c", "import importlib.util as u; print(u.find_spec('autograd_lab'), "
                                "u.find_spec('autograd_lab_solutions'))"], capture_output=True, text=True, cwd="/", env=env)
        assert found.stdout.split() == ["None", "None"], found.stdout   # nothing of the course in the venv
        assert stat.S_IMODE((root / "source").stat().st_mode) & 0o077 == 0

        solved = _notebook("00", {"00.cube_grad": CUBE, "00.needs_grad": NEEDS})
        solved = nbformat.reads(solved, as_version=4)
        solved.cells.insert(1, new_code_cell(HOSTILE.replace("ROOT", str(root))))
        (root / "submission" / "00_start_here.ipynb").write_text(nbformat.writes(solved))
        (root / "submission" / "01_dynamic_graph.ipynb").write_text(
            _notebook("01", {"01.saved_bytes": "saved_bytes = 14336"}))
        (root / "submission_metadata.json").write_text(json.dumps(
            _metadata("2026-11-22T10:00:00.000000-08:00", extension="2026-11-23T23:59:00.000000-08:00")))
        ran = _in_container("bash", root / "source" / "run_autograder", env=env, timeout=1500)
        assert ran.returncode == 0, ran.stderr[-3000:]
        results = _validate(json.loads((root / "results" / "results.json").read_text()))
        text = json.dumps(results)
        assert results["score"] == 4, results["output"] + ran.stdout[-3000:]   # 2 + 1 of 4 scaled to 8
        assert "day(s) late" not in results["output"] and "not on the roster" not in text
        probe = next(line for line in results["output"].splitlines() if "RuntimeError: probe " in line)
        seen = dict(item.split(":") for item in probe.split("RuntimeError: probe ")[1].split())
        assert seen.pop("import") in ("ImportError", "ModuleNotFoundError"), probe
        assert seen == dict.fromkeys(("solutions", "key", "source", "results", "metadata", "write"),
                                     "PermissionError"), probe
        assert "sandbox: container sandbox" in ran.stdout, ran.stdout[-2000:]
    finally:
        shutil.rmtree(root, ignore_errors=True)

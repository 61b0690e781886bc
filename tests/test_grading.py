"""The batch grader: fixture submissions graded end to end, and its parts one by one.

The end-to-end batch (one run, module-scoped) starts real kernels, so it takes a
while on a busy 2-core machine.  The grader under stress (a saturated machine, no
sandbox, no cgroups, SIGTERM) is in ``test_grading_under_stress.py`` and the solved
notebooks are graded in ``test_grading_solved.py``: files of their own so that the two
pytest workers (``--dist loadfile``) share the kernels.  Every other test here runs
without a kernel.  ``AUTOGRAD_LAB_KERNEL_PYTHON`` grades with
another Python (a CUDA build of torch, for example).
"""

import base64
import io
import json
import os
import pickle
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from autograd_lab import checking
from autograd_lab.course.cli import build_parser
from autograd_lab.grading import main as grade_main
from autograd_lab.grading import portable, reports, scoring
from autograd_lab.grading.batch import grade_batch
from autograd_lab.grading.execute import defined_names
from autograd_lab.grading.limits import Cgroups
from autograd_lab.grading.progress import ProgressBar
from autograd_lab.grading.submissions import UsageError, find_submissions, read_notebook, sha256

sys.path.insert(0, str(Path(__file__).parent))
from fixtures.grading.attacks import MARKER, write_attacks  # noqa: E402
from fixtures.grading.red_team import LEAK, SECRET_PATH, write_red_team  # noqa: E402
from fixtures.grading.batch import ALL, CUBE, options, processes_with  # noqa: E402
from fixtures.grading.submissions import write_submissions  # noqa: E402

SEEDS = [*CUBE.public_seeds, *CUBE.hidden_seeds]
SECRET = f"red-team-secret-{os.getpid()}"


# --- the whole batch, once -------------------------------------------------

@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("graded")
    paths = write_submissions(folder)
    paths.update(write_attacks(folder, out))
    paths.update(write_red_team(folder))
    hashes = {student: sha256(path) for student, path in paths.items()}
    stderr = io.StringIO()
    # A root-only secret under /etc, where an instructor's machine keeps its own (only when we are root).
    secret = os.geteuid() == 0 and not os.path.exists(SECRET_PATH)
    if secret:
        with open(os.open(SECRET_PATH, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(SECRET)
    try:
        graded = grade_batch([str(folder)], options(out), stream=stderr)
    finally:
        if secret:
            os.remove(SECRET_PATH)
    return {"reports": {r["student"]: r for r in graded}, "out": out, "paths": paths, "folder": folder,
            "hashes": hashes, "stderr": stderr.getvalue()}



@pytest.mark.parametrize("case", sorted(ALL))
def test_each_fixture_and_attack_gets_its_expected_grade(batch, case):
    score, statuses, problem = ALL[case]
    report = batch["reports"][case]
    assert report["score"] == score, report
    assert {g["exercise_id"]: g["status"] for g in report["exercises"]} == statuses, report
    assert report["max_score"] == 2, report   # extra markers in one file raise nobody's maximum
    if problem:
        assert any(problem in line for line in report["problems"]), report["problems"]


def test_misconceptions_are_named_not_just_wrong(batch):
    grades = {g["exercise_id"]: g for g in batch["reports"]["partly_wrong"]["exercises"]}
    # 6 * x ** 2 is doubled, and typed by hand: the judge names the one it checks first.
    assert grades["00.cube_grad"]["misconception"] in ("doubled", "typed_formula")
    assert grades["00.needs_grad"]["misconception"] == "no_requires_grad"


def test_hidden_checks_run_but_their_inputs_never_appear(batch):
    grade = batch["reports"]["correct"]["exercises"][0]
    assert grade["hidden_total"] == len(CUBE.hidden_seeds) and grade["hidden_passed"] == grade["hidden_total"]
    failing = batch["reports"]["partly_wrong"]["exercises"][0]
    text = json.dumps(failing["messages"])
    assert "hidden" in text
    assert "(7,)" not in text and "[7]" not in text  # hidden inputs have shape (7,); never shown


def test_forged_records_are_refused_not_believed(batch):
    for grade in batch["reports"]["patches_checker"]["exercises"]:
        assert grade["score"] == 0 and "status 'passed'" in grade["messages"][0]


def test_hostile_cells_are_contained_and_reported(batch):
    cells = batch["reports"]["hostile_cells"]["cells"]
    hog, flood, reuse, overwrite = cells[-4:]
    # 4 GiB is over the sandbox's 2048 MiB: the watchdog stops it, the cell is skipped on the re-run.
    assert hog["status"] == "skipped (dead)", hog
    assert any("more than 2048 MiB" in p for p in batch["reports"]["hostile_cells"]["problems"])
    assert flood["output_truncated"] and len(flood["output"]) == 100_000, flood["status"]
    assert reuse["status"] == overwrite["status"] == "ok"


def test_submissions_are_never_modified(batch):
    assert {s: sha256(p) for s, p in batch["paths"].items()} == batch["hashes"]


def test_gradebook_has_one_row_per_student_and_a_column_per_exercise(batch):
    lines = (batch["out"] / "gradebook.csv").read_text().splitlines()
    assert lines[0].startswith("student,score,max_score,status,00.cube_grad,00.needs_grad")
    assert len(lines) == 1 + len(batch["reports"])
    assert any(line.startswith("correct,2.0,2,graded,1.0,1.0") for line in lines)
    text = (batch["out"] / "gradebook.csv").read_text()
    assert "\x1b" not in text and "symbolic link" in text and "identical file" in text


def test_gradescope_results_have_every_required_field(batch):
    results = json.loads((batch["out"] / "gradescope" / "partly_wrong" / "results.json").read_text())
    assert {"score", "execution_time", "tests"} <= set(results)
    for test in results["tests"]:
        assert set(test) == {"name", "number", "score", "max_score", "status", "output",
                             "output_format", "visibility", "tags"}
        assert test["status"] == "failed" and test["tags"]


def test_item_analysis_reports_pass_rates_and_the_most_common_misconception(batch):
    items = {i["exercise_id"]: i for i in json.loads((batch["out"] / "item_analysis.json").read_text())["exercises"]}
    needs = items["00.needs_grad"]
    assert needs["submissions"] == len(batch["reports"])
    assert needs["most_common_misconception"] == "no_requires_grad"  # partly_wrong and redefines_check
    assert "| 00.needs_grad" in (batch["out"] / "item_analysis.md").read_text()


def test_progress_goes_to_the_stream_one_line_per_submission(batch):
    total = len(batch["reports"])
    lines = batch["stderr"].splitlines()
    assert sum(line.startswith("[") for line in lines) == total
    assert all(line.startswith(("[", "WARNING: ")) for line in lines), lines
    assert f"[{total}/{total}]" in batch["stderr"] and "\x1b" not in batch["stderr"]


# --- the parts, without kernels ---------------------------------------------

def _payload(records):
    buffer = io.BytesIO()
    torch.save(records, buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def _observed(answer):
    return {seed: checking.observe(CUBE, answer, seed) for seed in SEEDS}


def _flipped_cube(x):
    x = x.detach().requires_grad_()
    (-(x ** 3)).sum().backward()
    return x.grad


def test_scoring_judges_honest_records_like_check_does():
    assert scoring.grade_from_payload(CUBE, _payload(_observed(CUBE.reference)), SEEDS)["status"] == "passed"
    grade = scoring.grade_from_payload(CUBE, _payload(_observed(_flipped_cube)), SEEDS)
    assert grade["status"] == "failed" and grade["misconception"] == "sign_flipped"


def _amp_order_as_numpy_strings(micro_batches, clip, schedule):
    import numpy as np
    tail = (["unscale", "clip"] if clip else []) + ["scaler_step", "scaler_update"] + (
        ["scheduler_step_unless_skipped"] if schedule else [])
    return list(np.concatenate([np.tile(["forward_in_autocast", "scale_and_backward"], micro_batches), tail]))


def _numpy_diagnosis():
    import numpy as np
    return {np.str_("A"): np.str_("missing_from_optimizer"), "B": np.str_("graph_cut"), "C": np.str_("no_zero_grad")}


@pytest.mark.parametrize("exercise_id, make", [("05.amp_step_order", lambda: _amp_order_as_numpy_strings),
                                               ("07.diagnose", _numpy_diagnosis)])
def test_numpy_strings_are_sent_as_plain_text_and_graded_like_check_does(exercise_id, make):
    """adv-05-08-r8 finding 4: ``numpy.str_`` (a ``str`` subclass) went into the records as itself; check() said
    passed and the grader's ``weights_only`` load refused the payload: a correct answer scored error 0/1."""
    exercise = checking.get(exercise_id)
    seeds = [*exercise.public_seeds, *exercise.hidden_seeds]
    records = {seed: checking.observe(exercise, make(), seed) for seed in seeds}

    def texts(value):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from texts(key)
                yield from texts(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from texts(item)
        elif isinstance(value, str):
            yield value
    assert {type(text) for text in texts(records)} == {str}
    buffer = io.BytesIO()
    torch.save({"records": records, "fingerprints": {}}, buffer)     # as harvest.emit sends them
    grade = scoring.grade_from_payload(exercise, base64.b64encode(buffer.getvalue()).decode(), seeds)
    assert grade["status"] == "passed" and grade["score"] == grade["max_score"], grade
    assert checking.check(exercise_id, make()).status not in ("failed", "error")


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/autograd-lab-pwned",))


def test_a_pickle_that_runs_code_is_refused_and_never_runs():
    if os.path.exists("/tmp/autograd-lab-pwned"):
        os.remove("/tmp/autograd-lab-pwned")
    evil = base64.b64encode(pickle.dumps({0: _Boom()}, protocol=2)).decode()
    grade = scoring.grade_from_payload(CUBE, evil, SEEDS)
    assert grade["status"] == "error" and grade["score"] == 0
    assert not os.path.exists("/tmp/autograd-lab-pwned")


@pytest.mark.parametrize("records, why", [
    ({0: {"seed": 0, "status": "ok"}}, "one record per requested seed"),
    ({seed: {"seed": seed + 1, "status": "ok"} for seed in SEEDS}, "does not belong"),
    ({seed: {"seed": seed, "status": "passed"} for seed in SEEDS}, "status 'passed'"),
])
def test_malformed_or_forged_records_are_an_error_grade(records, why):
    grade = scoring.grade_from_payload(CUBE, _payload(records), SEEDS)
    assert grade["status"] == "error" and why in grade["messages"][0]


def test_records_with_missing_fields_are_an_error_not_a_crash():
    grade = scoring.grade_from_payload(CUBE, _payload({s: {"seed": s, "status": "ok"} for s in SEEDS}), SEEDS)
    assert grade["status"] == "error" and grade["score"] == 0


def test_defined_names_sees_top_level_definitions_only():
    source = ("%matplotlib inline\nimport torch as T\ndef cube_grad(x):\n    inner = 1\n"
              "needs_grad, other = {}, 2\nfor loop_var in range(3):\n    pass\nclass K: pass")
    assert defined_names(source) == {"T", "cube_grad", "needs_grad", "other", "K"}
    assert defined_names("%%time\ncube_grad = 1") == set()
    assert defined_names("def broken(:") == set()


def test_student_ids_come_from_paths_safe_and_unique(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "hw.ipynb").write_text("{}")
    (tmp_path / "bob.ipynb").write_text("{}")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "bob-checkpoint.ipynb").write_text("{}")
    assert [s.student for s in find_submissions([tmp_path])] == ["alice__hw", "bob"]
    twice = find_submissions([tmp_path / "bob.ipynb", tmp_path / "bob.ipynb"])
    assert [s.student for s in twice] == ["bob", "bob-2"]
    with pytest.raises(UsageError, match="no such file"):
        find_submissions([tmp_path / "missing"])


@pytest.mark.parametrize("content", [
    "", "{not json", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "nope"}),
    json.dumps({"nbformat": 4})])
def test_malformed_notebooks_are_reported_not_raised(tmp_path, content):
    path = tmp_path / "bad.ipynb"
    path.write_text(content)
    notebook, problem = read_notebook(path)
    assert notebook is None and problem.startswith(f"{path}: not a valid Jupyter notebook")


def test_usage_errors_say_what_to_do(tmp_path, capsys):
    write_submissions(tmp_path, ["malformed"])
    args = build_parser().parse_args(["grade", str(tmp_path), "--out", str(tmp_path / "out")])
    assert grade_main(args) == 2
    assert "--notebook" in capsys.readouterr().err
    assert grade_main(Namespace(**{**vars(args), "jobs": 0})) == 2


def test_report_file_names_cannot_escape_the_output_folder():
    assert reports.file_stem("../../etc/passwd") == "_.._etc_passwd"
    assert "/" not in reports.file_stem("a/b") and reports.file_stem("") == "_"


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    stream = Terminal()
    bar = ProgressBar(2, stream=stream)
    bar.advance("alice", "2/2")
    bar.advance("bob", "0/2", problem=True)
    text = stream.getvalue()
    assert text.count("\r") == 2 and "2/2" in text and "problems: 1" in text and text.endswith("\n")


def test_launcher_limits_files_and_processes_but_not_address_space(tmp_path):
    script = "ulimit -v; ulimit -f; echo ${JPY_PARENT_PID:-unset}"
    result = subprocess.run([sys.executable, "-m", "autograd_lab.grading.launcher", "--file-mb", "8", "--",
                             "/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "JPY_PARENT_PID": "1"})
    assert result.returncode == 0, result.stderr
    # No RLIMIT_AS: CUDA builds of torch cannot even import under one.
    assert result.stdout.split() == ["unlimited", str(8 * 1024 * 1024 // 512), "unset"]


# --- the sandbox, seen from the batch ----------------------------------------

def test_nothing_an_attack_started_survives_the_batch(batch):
    assert processes_with(MARKER) == []


def test_no_file_of_the_grader_or_another_student_was_changed(batch):
    assert {s: sha256(p) for s, p in batch["paths"].items()} == batch["hashes"]
    for path in batch["out"].rglob("*"):
        assert not path.is_file() or b"pwned" not in path.read_bytes(), path
    for student, report in batch["reports"].items():
        saved = json.loads((batch["out"] / "students" / f"{student}.json").read_text())
        assert saved["score"] == report["score"], student


def test_the_kernel_sees_no_solutions_no_other_folder_and_no_network(batch):
    output = batch["reports"]["attack_daemon"]["cells"][-1]["output"]
    assert "WROTE" not in output and output.count("denied") == 5, output
    assert "solutions: False" in output or "solutions: []" in output, output
    assert "no network" in output and "NETWORK\n" not in output, output
    others = output.split("others: ")[1].splitlines()[0]
    # Only its own slot's folder (where its work folder is mounted), and not the submissions.
    assert others.count("/tmp/autograd-lab-grade-") <= 1 and others.endswith("False"), others
    described = batch["reports"]["attack_daemon"]["sandbox"]
    assert ("an unprivileged uid of its own" if os.geteuid() == 0 else "uid 1000 in a user namespace") in described


def test_hostile_records_are_refused_with_their_reason(batch):
    def first_message(student, exercise_id):
        grades = {g["exercise_id"]: g for g in batch["reports"][student]["exercises"]}
        return grades[exercise_id]["messages"][0]
    assert "nested deeper than 40" in first_message("attack_nested_bomb", "00.cube_grad")
    assert "integer out of range" in first_message("attack_overflow", "00.needs_grad")
    assert "one entry per argument" in first_message("attack_empty_lists", "00.cube_grad")
    assert "does not belong to its seed" in first_message("attack_tensor_seed", "00.cube_grad")


def test_colliding_odd_and_linked_names_each_get_their_own_files(batch):
    for student in ("a_b", "a_b-2", "caf_xe9", "evil__31m__2J", "linked"):
        assert (batch["out"] / "students" / f"{student}.json").exists(), student
    assert all(ord(c) >= 32 for r in batch["reports"].values() for c in r["submission"])
    assert any("identical file" in p and "correct" in p for p in batch["reports"]["linked"]["problems"])


# --- judging untrusted records, without kernels -------------------------------

def _declaring(numel):
    """A real torch archive of a 10-byte tensor whose pickle claims ``numel`` elements."""
    import zipfile
    buffer = io.BytesIO()
    torch.save({0: torch.zeros(10, dtype=torch.uint8)}, buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    forged = io.BytesIO()
    with zipfile.ZipFile(forged, "w", compression=zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("data.pkl"):
                old = b"K\ntq\x06Q"   # BININT1 10, the storage's element count, then its BINPERSID
                assert data.count(old) == 1
                data = data.replace(old, b"J" + numel.to_bytes(4, "little") + b"tq\x06Q")
            target.writestr(info.filename, data)
    return base64.b64encode(forged.getvalue()).decode()


def test_a_storage_declaring_more_than_it_holds_is_refused_before_loading():
    grade = scoring.grade_from_payload(CUBE, _declaring(1 << 30), SEEDS)   # 1 GiB in a 1 KB archive
    assert grade["status"] == "error" and "declares more elements" in grade["messages"][0]


def test_a_compressed_payload_is_refused():
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    grade = scoring.grade_from_payload(CUBE, base64.b64encode(buffer.getvalue()).decode(), SEEDS)
    assert grade["status"] == "error" and "compressed" in grade["messages"][0]


def test_a_kernel_gradcheck_verdict_is_ignored_and_jacobians_are_judged_here():
    assert scoring.gradcheck_verdict(None)["passed"] is False
    same = torch.eye(3, dtype=torch.float64)
    assert scoring.gradcheck_verdict({"analytical": [same], "numerical": [same.clone()]})["passed"] is True
    assert scoring.gradcheck_verdict({"analytical": [same], "numerical": [2 * same]})["passed"] is False
    assert scoring.gradcheck_verdict({"analytical": [], "numerical": []})["passed"] is False


def test_warnings_are_capped_and_deduplicated_in_linear_time():
    from autograd_lab.checking.records import MAX_WARNINGS, unique_capped
    texts = [f"w{i % 7}" for i in range(200_000)] + [f"x{i}" for i in range(200_000)]
    capped = unique_capped(texts)
    assert capped[:7] == [f"w{i}" for i in range(7)] and len(capped) == MAX_WARNINGS


# --- no sandbox ----------------------------------------------------------------

def test_grading_refuses_without_a_sandbox_and_says_how_to_install_it(monkeypatch, tmp_path):
    from autograd_lab.grading import sandbox
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap") as refused:
        sandbox.Sandbox.for_this_machine(cgroups=Cgroups(problem="not needed here"))
    assert "--allow-unsandboxed" in str(refused.value)
    unsafe = sandbox.Sandbox.for_this_machine(allow_unsandboxed=True, cgroups=Cgroups(problem="not needed here"))
    assert not unsafe.enabled and "UNSANDBOXED" in unsafe.describe()
    place = sandbox.Place(str(tmp_path / "kernel"), str(tmp_path / "submission.ipynb"))
    assert unsafe.kernel_argv(place)[0] != "bwrap"


def test_a_refused_batch_leaves_an_existing_gradebook_alone(monkeypatch, tmp_path, capsys):
    """#25: a failing bwrap refused loudly but first overwrote gradebook.csv with an empty one."""
    from autograd_lab.grading import sandbox
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr("autograd_lab.grading.batch.student_build", lambda **kwargs: str(tmp_path))
    write_submissions(tmp_path, ["correct"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "gradebook.csv").write_text("student,score\nalice,2\n")
    args = build_parser().parse_args(["grade", str(tmp_path / "correct.ipynb"), "--out", str(out),
                                      "--notebook", "00"])
    assert grade_main(args) == 2
    assert "bubblewrap" in capsys.readouterr().err
    assert (out / "gradebook.csv").read_text() == "student,score\nalice,2\n"
    assert sorted(p.name for p in out.iterdir()) == ["gradebook.csv"]


# --- issue 25: the second red team ---------------------------------------------

def test_no_report_holds_a_secret_a_hidden_input_or_an_unencodable_character(batch):
    for path in batch["out"].rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and LEAK.encode() not in data, path
            data.decode("utf-8")   # every file is valid UTF-8
            assert b"\x1b" not in data and b"\\udcff" not in data, path
    # Every student has every file, the unencodable one included, and the item analysis is complete.
    for student in batch["reports"]:
        assert (batch["out"] / "feedback" / f"{reports.file_stem(student)}.html").exists(), student
    items = json.loads((batch["out"] / "item_analysis.json").read_text())["exercises"]
    assert {i["exercise_id"]: i["submissions"] for i in items} == {e: len(batch["reports"]) for e in
                                                                   ("00.cube_grad", "00.needs_grad")}


def test_the_sandbox_binds_only_the_etc_files_a_kernel_needs(batch):
    output = batch["reports"]["rt_etc_secrets"]["cells"][-1]["output"]
    for path in ("/etc/shadow", "/etc/gshadow", SECRET_PATH, "/etc/sudoers", "/root/.bashrc"):
        assert f"unreadable {path}" in output, output
    listed = set(eval(output.split("etc: ")[1].splitlines()[0]))   # noqa: S307 - our own print of a list
    from autograd_lab.grading.sandbox import ETC
    assert listed <= set(ETC) | {"passwd", "group"}, listed


def test_tmpfs_and_the_work_folder_have_a_size_limit(batch):
    tmpfs = batch["reports"]["rt_tmpfs_filler"]["cells"][-1]["output"]
    disk = batch["reports"]["rt_disk_filler"]["cells"][-1]["output"]
    assert "WROTE" not in tmpfs and tmpfs.count("stopped at") == 2, tmpfs
    assert "WROTE" not in disk and "stopped at" in disk, disk


def test_fork_and_thread_bombs_are_contained_and_honest_neighbours_keep_full_marks(batch):
    for student in ("rt_fork_bomb", "rt_thread_bomb"):
        bomb = batch["reports"][student]["cells"][-1]
        assert bomb["status"] in ("skipped (dead)", "skipped (unresponsive)", "timed out"), bomb
    honest = [r for r in batch["reports"].values() if r["student"] in ("correct", "a_b-2", "caf_xe9")]
    assert [r["score"] for r in honest] == [2, 2, 2]


def test_a_shadowed_launcher_cannot_lift_the_file_limit(batch):
    cells = batch["reports"]["rt_shadow_launcher"]["cells"]
    assert cells[-2]["status"] == "skipped (dead)" and "file limit held" in cells[-1]["output"], cells[-2:]


def test_traps_at_the_old_inputs_paths_change_nothing(batch):
    report = batch["reports"]["rt_input_traps"]
    assert report["cells"][0]["output"] == "traps set\n"
    assert report["execution_time"] < 600   # a FIFO once held a job slot until the submission timeout


def test_hidden_inputs_never_reach_the_students_feedback(batch):
    grade = {g["exercise_id"]: g for g in batch["reports"]["rt_hidden_leak"]["exercises"]}["00.cube_grad"]
    assert grade["public_passed"] == 3 and grade["hidden_passed"] == 0
    assert LEAK not in json.dumps(batch["reports"]["rt_hidden_leak"])


def test_the_limits_say_who_enforces_them(batch):
    described = batch["reports"]["correct"]["sandbox"]
    cgroups = Cgroups.for_this_machine()
    cgroups.remove()
    if cgroups.enabled:
        assert "enforced by the kernel" in described
    else:
        assert "NOT ENFORCED BY THE KERNEL" in described
        assert batch["reports"]["correct"]["problems"][0].startswith("LIMITS NOT ENFORCED BY THE KERNEL")
    if os.geteuid() == 0:
        assert "WARNING: grading as root" in batch["stderr"]


# --- inputs that cross into the kernel --------------------------------------------

def test_a_graph_crosses_as_a_replay_and_its_fingerprint_proves_it():
    exercise = checking.get("01.count_nodes")
    args, data = portable.pack(lambda: exercise.inputs(101, True))
    meant = portable.fingerprint(args)
    arrived = portable.unpack(data)
    assert portable.same(meant, portable.fingerprint(arrived)) is None
    assert exercise.reference(*arrived) == exercise.reference(*args)
    # Pickled alone, the graph is lost; the fingerprint says so.
    assert portable.same(meant, portable.fingerprint(pickle.loads(pickle.dumps(tuple(a.detach() for a in args)))))


@pytest.mark.parametrize("exercise_id", ["07.nan_source", "08.no_sync_loop"])
def test_functions_and_ddp_models_are_rebuilt_from_source(exercise_id):
    exercise = checking.get(exercise_id)
    for seed in (*exercise.public_seeds, *exercise.hidden_seeds):
        args, data = portable.pack(lambda: exercise.inputs(seed, exercise.is_hidden(seed)))
        assert b"autograd_lab_solutions" not in data
        assert portable.same(portable.fingerprint(args), portable.fingerprint(portable.unpack(data))) is None


def test_a_reference_never_crosses():
    exercise = checking.get("00.cube_grad")
    with pytest.raises(portable.NotPortable, match="reference"):
        portable.dumps((exercise.reference,))


# --- the container kind, without a kernel ------------------------------------------------

def test_the_container_kind_runs_kernels_as_an_unprivileged_uid_without_bwrap(tmp_path):
    from autograd_lab.grading.sandbox import SANDBOX_UID_BASE, Place, Sandbox
    container = Sandbox(kind="container", package_root=str(tmp_path), as_root=True, cgroups=Cgroups(problem="x"))
    argv = container.kernel_argv(Place(str(tmp_path / "k"), str(tmp_path / "s.ipynb"), slot=3))
    assert "bwrap" not in argv and argv[argv.index("--uid") + 1] == str(SANDBOX_UID_BASE + 3)
    assert "container sandbox" in container.describe() and "unprivileged uid" in container.describe()
    with pytest.raises(ValueError):
        Sandbox.for_this_machine(kind="none", cgroups=Cgroups(problem="x"))   # only with allow_unsandboxed


def test_a_working_sandbox_is_probed_once_per_process_and_a_failed_probe_again(monkeypatch, tmp_path):
    """An assignment grades one batch per notebook: each probe starts a sandboxed Python importing torch."""
    from autograd_lab.grading import sandbox
    probes, real_probe = [], sandbox._probe

    def probe(base):
        probes.append(base.package_root)
        return ("no bwrap today", None) if "broken" in base.package_root else ("", base)
    monkeypatch.setattr(sandbox, "_probe", probe)
    monkeypatch.setattr(sandbox, "_PROBED", {})
    working, broken = str(tmp_path / "working"), str(tmp_path / "broken")
    for _ in range(3):
        sandbox.Sandbox.for_this_machine(package_root=working, cgroups=Cgroups(problem="not needed here"))
        with pytest.raises(sandbox.SandboxUnavailable, match="no bwrap today"):
            sandbox.Sandbox.for_this_machine(package_root=broken, cgroups=Cgroups(problem="not needed here"))
    assert probes == [working, broken, broken, broken]
    # What the probe checks without starting anything is checked every time.
    monkeypatch.setattr(sandbox, "_probe", real_probe)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="bwrap"):
        sandbox.Sandbox.for_this_machine(package_root=working, cgroups=Cgroups(problem="not needed here"))

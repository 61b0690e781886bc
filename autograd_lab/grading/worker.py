"""One submission, executed in a process of its own: ``python -m autograd_lab.grading.worker JOB.json``.

The batch starts one worker per submission in a new process group (and a cgroup
of its own, where the host allows), so it can enforce a wall-clock limit by
killing all of it (worker, kernels and anything they started), and a worker
that fails takes nothing else down.  The job names the code cells to run (read
by the batch, which already validated the notebook); the worker writes
``job["result_path"]``: the ``Execution`` and the grades, as JSON.

The worker makes every input in its own process and hands it to the kernel
inside the request (``inputs_for``), with a fingerprint kept here to check what
the kernel rebuilt; it never reads or writes a file the kernel could reach.
"""

import base64
import ctypes
import dataclasses
import itertools
import json
import os
import pickle
import sys

from .execute import execute_submission
from .kernel import SandboxedKernel
from .limits import Group
from .sandbox import Place, Sandbox
from .watchdog import kill_tree

_PR_SET_CHILD_SUBREAPER = 36


def run_job(job):
    sandbox = Sandbox.from_json(job["sandbox"])
    group = Group(tuple(tuple(item) for item in job["cgroup"])) if job.get("cgroup") else None
    numbers = itertools.count(1)
    fingerprints = {}

    def open_kernel():
        number = next(numbers)
        place = Place(os.path.join(job["folder"], f"kernel{number}"), job["submission"], slot=job["slot"])
        return SandboxedKernel(sandbox, place, output_limit=job["output_limit"], parent_group=group,
                               pgid_log=job["pgid_log"], number=number)

    def write_inputs(exercise_id, seeds):
        packed, meant = inputs_for(exercise_id, seeds)
        fingerprints.setdefault(exercise_id, {}).update(meant)
        return packed

    execution = execute_submission(job["cells"], job["plan"], open_kernel,
                                   job["cell_timeout"], job["check_timeout"], write_inputs=write_inputs)
    return {"execution": dataclasses.asdict(execution), "grades": judge_all(job["plan"], execution, fingerprints)}


def judge_all(plan, execution, fingerprints=None):
    """Every exercise's grade, judged here: one hostile record costs this process, never the batch."""
    from autograd_lab import checking

    from . import scoring

    grades = {}
    for item in plan:
        exercise = checking.get(item["id"])
        seeds = [*item["public_seeds"], *item["hidden_seeds"]]
        try:
            if item["id"] in execution.failures:
                why = execution.failures[item["id"]]
                grades[item["id"]] = scoring.error_grade(exercise, f"the answer could not be observed: {why}")
            elif item["id"] in execution.records:
                grades[item["id"]] = scoring.grade_from_payloads(
                    exercise, execution.records[item["id"]], seeds, (fingerprints or {}).get(item["id"]))
            else:
                grades[item["id"]] = scoring.error_grade(exercise, "the answer could not be observed: "
                                                                   "no records came back")
        except Exception as error:  # anything at all: this exercise's error, the others still count
            grades[item["id"]] = scoring.error_grade(exercise, f"judging failed ({type(error).__name__})")
    return grades


def inputs_for(exercise_id, seeds):
    """``(text for the request, {seed: fingerprint})``: every input of these cases, made here.

    The kernel imports a student build with no hidden seeds and no input code, so
    the grader makes the inputs right after the notebook ran.  Graphs, functions
    and DDP models travel as recipes (``portable``); nothing defined beside the
    references travels by reference.  ``(None, {})`` for a value exercise.
    """
    from autograd_lab import checking
    from autograd_lab.checking.observe import flat_tensors
    from autograd_lab.checking.records import readable_grad

    from . import portable

    exercise = checking.get(exercise_id)
    if exercise.kind == "value":
        return None, {}
    packed, meant = {}, {}
    for seed in seeds:
        with portable.Recorder() as recorder:
            args = exercise.inputs(seed, exercise.is_hidden(seed))
        # torch.save and pickle drop .grad: carry it beside (04.sgd_step).
        grads = [readable_grad(t) for t in flat_tensors(args)]
        data = portable.dumps({"args": args, "grads": grads}, recorder)
        if b"autograd_lab_solutions" in data:
            raise portable.NotPortable("an input is an object defined beside the references")
        packed[int(seed)] = data
        meant[int(seed)] = portable.fingerprint(args)
    return base64.b64encode(pickle.dumps(packed, protocol=4)).decode("ascii"), meant


def _become_subreaper():
    """Orphans of our kernels (a double-forked daemon outside any sandbox) become our children, to be killed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    _become_subreaper()
    with open(argv[0]) as file:
        job = json.load(file)
    try:
        result = run_job(job)
        with open(job["result_path"], "w") as file:
            json.dump(result, file)
    finally:
        kill_tree(os.getpid(), spare_root=True)   # whatever the kernels left, reparented to us


if __name__ == "__main__":
    main()

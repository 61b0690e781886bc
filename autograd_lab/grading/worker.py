"""One submission, executed in a process of its own: ``python -m autograd_lab.grading.worker JOB.json``.

The batch starts one worker per submission in a new process group, so it can
enforce a wall-clock limit by killing the whole group (worker, kernel and
anything the kernel started), and a worker that fails takes nothing else down.
The job names the code cells to run (read by the batch, which already
validated the notebook); the worker writes ``job["result_path"]``: the
``Execution`` as JSON.
"""

import dataclasses
import io
import json
import os
import sys

from .execute import execute_submission
from .kernel import SandboxedKernel
from .sandbox import Sandbox


def run_job(job):
    sandbox = Sandbox(**{key: tuple(value) if isinstance(value, list) else value
                         for key, value in job["sandbox"].items()})

    def open_kernel():
        return SandboxedKernel(sandbox, job["spec_folder"], job["home"], output_limit=job["output_limit"], pgid_log=job["pgid_log"])

    def write_inputs(exercise_id):
        return send_inputs(exercise_id, job["home"]) if sandbox.enabled else None

    execution = execute_submission(job["cells"], job["plan"], open_kernel,
                                   job["cell_timeout"], job["check_timeout"], write_inputs=write_inputs)
    return {"execution": dataclasses.asdict(execution), "grades": judge_all(job["plan"], execution)}


def judge_all(plan, execution):
    """Every exercise's grade, judged here: one hostile record costs this process, never the batch."""
    from autograd_lab import checking

    from . import scoring

    grades = {}
    for item in plan:
        exercise = checking.get(item["id"])
        try:
            if item["id"] in execution.records:
                grades[item["id"]] = scoring.grade_from_payload(exercise, execution.records[item["id"]], item["seeds"])
            else:
                why = execution.failures.get(item["id"], "no records came back")
                grades[item["id"]] = scoring.error_grade(exercise, f"the answer could not be observed: {why}")
        except Exception as error:  # anything at all: this exercise's error, the others still count
            grades[item["id"]] = scoring.error_grade(exercise, f"judging failed ({type(error).__name__})")
    return grades


def send_inputs(exercise_id, folder):
    """Write every input of the exercise (public and hidden) for the kernel; return the path.

    The kernel imports a student build with no hidden seeds and no input code: the
    grader makes the inputs here, right after the notebook ran, and the kernel
    reads them once.
    """
    import torch

    from autograd_lab import checking
    from autograd_lab.checking.observe import flat_tensors
    from autograd_lab.checking.records import readable_grad

    exercise = checking.get(exercise_id)
    if exercise.kind == "value":
        return None
    saved = {}
    for seed in (*exercise.public_seeds, *exercise.hidden_seeds):
        args = exercise.inputs(seed, exercise.is_hidden(seed))
        saved[int(seed)] = {"args": args, "grads": [readable_grad(t) for t in flat_tensors(args)]}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    if b"autograd_lab_solutions" in buffer.getvalue():
        raise TypeError("an input is an object defined next to the reference")
    path = os.path.join(folder, f".inputs-{exercise_id}.pt")
    with open(path, "wb") as file:
        file.write(buffer.getvalue())
    return path


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as file:
        job = json.load(file)
    result = run_job(job)
    with open(job["result_path"], "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main()

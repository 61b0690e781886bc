"""One submission, executed in a process of its own: ``python -m autograd_lab.grading.worker JOB.json``.

The batch starts one worker per submission in a new process group, so it can
enforce a wall-clock limit by killing the whole group (worker, kernel and
anything the kernel started), and a worker that fails takes nothing else down.
The job names the code cells to run (read by the batch, which already
validated the notebook); the worker writes ``job["result_path"]``: the
``Execution`` as JSON.
"""

import dataclasses
import json
import sys

from .execute import execute_submission
from .kernel import SandboxedKernel
from .sandbox import Sandbox


def run_job(job):
    sandbox = Sandbox(**job["sandbox"])

    def open_kernel():
        return SandboxedKernel(sandbox, job["spec_folder"], job["home"], uid=job["uid"],
                               output_limit=job["output_limit"], pgid_log=job["pgid_log"])

    execution = execute_submission(job["cells"], job["plan"], open_kernel,
                                   job["cell_timeout"], job["check_timeout"])
    return dataclasses.asdict(execution)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as file:
        job = json.load(file)
    result = run_job(job)
    with open(job["result_path"], "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main()

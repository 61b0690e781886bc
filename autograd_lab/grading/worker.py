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

``python -m autograd_lab.grading.worker --serve`` is the batch's worker
factory: it imports torch, the checker and the references once, then forks one
worker per job path it reads on stdin (``started PID`` and ``ended PID STATUS``
on stdout).  Each forked worker is exactly the process the batch would have
started, in a session and cgroup of its own, minus the seconds of CPU time that
importing torch and the references costs every new process.
"""

import base64
import ctypes
import dataclasses
import itertools
import json
import os
import pickle
import sys
import threading
import time
import traceback

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
        ipc = os.path.join(job["ipc_root"], f"{job['slot']}-{number}") if job.get("ipc_root") else ""
        place = Place(os.path.join(job["folder"], f"kernel{number}"), job["submission"], slot=job["slot"], ipc=ipc)
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


def run_job_file(job_path):
    """Run the job in ``job_path`` and write its result; kill whatever its kernels left behind."""
    _become_subreaper()
    with open(job_path) as file:
        job = json.load(file)
    try:
        result = run_job(job)
        with open(job["result_path"], "w") as file:
            json.dump(result, file)
    finally:
        kill_tree(os.getpid(), spare_root=True)   # whatever the kernels left, reparented to us


def serve():
    """Import everything once, then fork a worker for each job path read on stdin."""
    import torch

    torch.set_num_threads(1)   # no thread pool is running when we fork
    from autograd_lab import checking

    from . import portable, scoring  # noqa: F401 - imported here so that every worker has them

    checking.all_exercises()
    said = threading.Lock()

    def say(text):
        with said:
            os.write(1, f"{text}\n".encode())

    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.05)
                continue
            say(f"ended {pid} {os.waitstatus_to_exitcode(status)}")

    threading.Thread(target=reap, daemon=True).start()
    for line in sys.stdin:
        job_path = line.strip()
        if job_path:
            pid = os.fork()
            if pid == 0:
                _forked_worker(job_path)
            say(f"started {pid}")


def _forked_worker(job_path):
    """In the forked child: a session, the job's cgroup and log of its own, then the job. Never returns."""
    code = 1
    try:
        os.setsid()
        with open(job_path) as file:
            job = json.load(file)
        for procs in job.get("enter", ()):
            with open(procs, "w") as file:
                file.write(str(os.getpid()))
        log = os.open(job["log_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.stdin = open(os.devnull)
        run_job_file(job_path)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Factory:
    """The batch's side of ``--serve``: start a worker for a job, wait for it to end."""

    def __init__(self):
        import subprocess

        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "autograd_lab.grading.worker", "--serve"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True, env=env, text=True)
        self._asking = threading.Lock()
        self._changed = threading.Condition()
        self._started, self._ended = [], {}
        self._gone = False
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self):
        for line in self.process.stdout:
            words = line.split()
            with self._changed:
                if words[:1] == ["started"]:
                    self._started.append(int(words[1]))
                elif words[:1] == ["ended"]:
                    self._ended[int(words[1])] = int(words[2])
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def start(self, job_path, timeout=600):
        """The pid of a new worker running ``job_path`` (``OSError`` if the factory is gone)."""
        with self._asking:
            try:
                self.process.stdin.write(f"{job_path}\n")
                self.process.stdin.flush()
            except (OSError, ValueError) as error:
                raise OSError(f"the worker factory is gone ({error})") from None
            with self._changed:
                if not self._changed.wait_for(lambda: self._started or self._gone, timeout):
                    raise OSError("the worker factory did not answer")
                if not self._started:
                    raise OSError("the worker factory is gone")
                return self._started.pop(0)

    def wait(self, pid, timeout):
        """The worker's exit status; ``TimeoutError`` after ``timeout`` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: pid in self._ended or self._gone, timeout):
                raise TimeoutError(pid)
            return self._ended.pop(pid, -1)

    def close(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except Exception:
            self.process.kill()
            self.process.wait()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--serve"]:
        serve()
    else:
        run_job_file(argv[0])


if __name__ == "__main__":
    main()

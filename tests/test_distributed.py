"""launch() runs real gloo ranks on loopback, returns their results, and never hangs."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from autograd_lab.labs import ddp_scenarios as scenarios
from autograd_lab.labs.distributed import RankError, launch


def _full_batch_grads(n, reduction="mean"):
    model = scenarios.make_model()
    x, y = scenarios.make_data(n)
    F.mse_loss(model(x), y, reduction=reduction).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_one_ddp_step_on_two_ranks_equals_one_step_on_the_whole_batch():
    run = launch(scenarios.ddp_step, world_size=2, timeout=120, batch_per_rank=4)
    assert run.ok, run.errors
    expected = _full_batch_grads(8)
    for rank in (0, 1):
        for name, grad in run.results[rank]["grads"].items():
            torch.testing.assert_close(grad, expected[name])


def test_no_sync_needs_the_forward_inside_to_skip_all_reduces():
    runs = {flag: launch(scenarios.accumulate, timeout=120, micro_batches=4, forward_in_no_sync=flag)
            for flag in (True, False)}
    assert runs[True].results[0]["allreduces"] == 1
    assert runs[False].results[0]["allreduces"] == 4
    expected = _full_batch_grads(16)
    for name, grad in runs[True].results[1]["grads"].items():
        torch.testing.assert_close(grad, expected[name])


def test_a_rank_that_skips_backward_makes_the_other_time_out_and_launch_stops_it():
    run = launch(scenarios.skip_backward, timeout=60, grace=1.0, wait_seconds=2.0, stall_seconds=60)
    assert not run.ok
    assert 0 in run.errors and run.terminated == [1]
    assert run.ended_by == "grace"  # stopped after rank 0's failure, not at launch's own deadline
    with pytest.raises(RankError, match="^Timed out"):
        run.raise_errors()


def test_unused_parameters_fail_without_find_unused_parameters():
    failing = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=False)
    with pytest.raises(RankError, match="Expected to have finished reduction"):
        failing.raise_errors()
    fixed = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=True)
    assert fixed.ok and fixed.results[0]["aux_grad_is_none"]


def test_launch_runs_a_function_written_in_a_notebook():
    # What spawn cannot do: a function that no module defines travels by value (labs/shipping.py).
    offset = 10

    def local_scenario(rank, world_size, scale=1):
        total = torch.tensor([float(rank + offset)])
        dist.all_reduce(total)
        return {"total": float(total) * scale}
    run = launch(local_scenario, timeout=120, scale=2)
    assert run.ok, run.errors
    assert [run.results[rank]["total"] for rank in (0, 1)] == [2 * (10 + 11)] * 2
    with pytest.raises(TypeError, match="needs a function"):
        launch("not a function")
    with pytest.raises(ValueError, match="world_size"):
        launch(scenarios.ddp_step, world_size=0)


def test_ddp_starts_every_rank_from_rank_0s_weights():
    run = launch(scenarios.initial_weights, timeout=120)
    assert run.ok, run.errors
    expected = scenarios.make_model(seed=0).state_dict()
    for rank in (0, 1):
        for name, weight in run.results[rank]["weights"].items():
            assert torch.equal(weight, expected[name])


def test_an_unused_parameter_leaves_the_first_step_unsynchronised():
    run = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=False, steps=1)
    assert run.ok, run.errors
    model = scenarios.make_model()
    x, y = scenarios.make_data(8)
    F.mse_loss(model(x[:4]), y[:4]).backward()          # rank 0's own shard, alone
    for name, grad in run.results[0]["body_grads"].items():
        torch.testing.assert_close(grad, dict(model.named_parameters())[name].grad)


def test_batchnorm_statistics_differ_per_rank_until_ddp_broadcasts_rank_0s():
    run = launch(scenarios.batchnorm_statistics, timeout=120)
    assert run.ok, run.errors
    first, second = run.results[0], run.results[1]
    assert not torch.allclose(first["running_mean"], second["running_mean"])
    assert torch.equal(second["running_mean_after_eval_forward"], first["running_mean"])
    synced = launch(scenarios.batchnorm_statistics, timeout=120, sync=True)
    with pytest.raises(RankError, match="SyncBatchNorm layers only work with GPU modules"):
        synced.raise_errors()


def test_accumulated_scale_on_two_ranks_is_4_1_6():
    # The experiment behind 08.grad_scale: K = 4 micro-batches of B = 3 rows, 2 outputs.
    model = scenarios.make_model()
    x, y = scenarios.make_data(2 * 4 * 3)
    F.mse_loss(model(x), y).backward()
    for loss, factor in (("mean", 4), ("mean/K", 1), ("sum/K", 6)):
        run = launch(scenarios.accumulated_scale, world_size=2, loss=loss)
        assert run.ok, run.errors
        for name, p in model.named_parameters():
            torch.testing.assert_close(run.results[0]["grads"][name], factor * p.grad)


def test_reentrant_checkpoint_of_a_reused_block_fails_under_ddp_and_non_reentrant_works():
    failed = launch(scenarios.checkpointed_ddp, world_size=2, use_reentrant=True)
    with pytest.raises(RankError, match="Expected to mark a variable ready only once"):
        failed.raise_errors()
    fixed = launch(scenarios.checkpointed_ddp, world_size=2, use_reentrant=False)
    assert fixed.ok, fixed.errors


def test_nccl_default_timeout_is_ten_minutes_even_without_nccl():
    from datetime import timedelta

    from autograd_lab.labs.distributed import nccl_default_timeout
    timeout, _ = nccl_default_timeout()
    assert timeout == timedelta(minutes=10)


_LEAVES_NOTHING = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from autograd_lab.labs import ddp_scenarios as scenarios
from autograd_lab.labs.distributed import launch, single_process_group
if __name__ == "__main__":
    assert launch(scenarios.initial_weights, world_size=2).ok
    single_process_group()
    DDP(nn.Linear(2, 2))(torch.ones(1, 2)).sum().backward()
"""


def test_lab_08_leaves_no_temporary_folder_behind(tmp_path):
    # What notebook 08 does: launches (forkserver, its socket folder) and a group of one (08.no_sync_loop).
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    script = tmp_path / "lab08.py"
    script.write_text(_LEAVES_NOTHING)
    # A short folder, not tmp_path: the forkserver's socket lives under TMPDIR, and a Unix
    # socket path longer than 107 bytes cannot be bound (pytest's tmp_path under CI is).
    scratch = Path(tempfile.mkdtemp(prefix="l08-", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    try:
        subprocess.run([sys.executable, str(script)], check=True, env=env, timeout=300)
        left = sorted(path.name for path in scratch.iterdir() if not _torchs_own(path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # Anything else (autograd-lab-*, pymp-*) would be ours.
    assert left == []


@pytest.mark.parametrize("now", [False, True], ids=["shut down", "killed"])
def test_a_kernel_that_ran_lab_08_leaves_no_temporary_folder_behind(now):
    # In JupyterLab the kernel never reaches its exit handlers (ipykernel waits for the resource
    # tracker, which ignores SIGTERM, and is killed after 5 s): the launcher's watcher cleans up.
    import os
    import shutil
    import tempfile
    import time
    from pathlib import Path

    from jupyter_client import KernelManager

    scratch = Path(tempfile.mkdtemp(prefix="l08k-", dir="/tmp"))
    manager = KernelManager(kernel_name="python3", transport="ipc", ip=str(scratch / "kernel"))
    manager.connection_file = str(scratch / "connection.json")
    env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "OMP_NUM_THREADS": "1"}
    (scratch / "tmp").mkdir()
    try:
        manager.start_kernel(env=env)
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(
            "from autograd_lab.labs import ddp_scenarios as scenarios\n"
            "from autograd_lab.labs.distributed import launch\n"
            "assert launch(scenarios.initial_weights, world_size=2).ok", timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert any(p.name.startswith("pymp-") for p in (scratch / "tmp").iterdir())  # the forkserver's
        client.stop_channels()
        manager.shutdown_kernel(now=now)
        left = lambda: sorted(p.name for p in (scratch / "tmp").iterdir() if not _torchs_own(p))
        deadline = time.monotonic() + 30
        while left() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left() == []
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
        shutil.rmtree(scratch, ignore_errors=True)


def _torchs_own(path):
    """Folders torch itself leaves in TMPDIR, whatever the course does."""
    # torch._dynamo (DDP imports it) makes one cache folder per user, reused by every run.
    if path.name.startswith("torchinductor_"):
        return True
    # torch 2.5.1's torch/distributed/nn/jit/instantiator.py makes a TemporaryDirectory at import,
    # and a forkserver that imported it can exit without running its finalizer (seen in one run of
    # two); the instantiator of 2.13.0 and 2.15.0 makes none.
    return path.is_dir() and [p.name for p in path.iterdir()] == ["_remote_module_non_scriptable.py"]


class _Alive:
    def is_alive(self):
        return True


def test_a_rank_silent_after_its_peer_finished_is_stopped_soon(monkeypatch):
    import queue
    import time

    from autograd_lab.labs import distributed

    class OneReport:
        def __init__(self):
            self.reports = [(0, "ok", distributed._to_bytes({"done": True}))]

        def get(self, timeout):
            if self.reports:
                return self.reports.pop()
            time.sleep(timeout)
            raise queue.Empty

        def empty(self):
            return not self.reports

    monkeypatch.setattr(distributed, "STRAGGLER_SECONDS", 0.3)
    run = distributed.DistributedRun(world_size=2)
    distributed._collect(run, OneReport(), [_Alive(), _Alive()], deadline=time.monotonic() + 60, grace=2.0)
    assert sorted(run.results) == [0] and run.ended_by == "straggler"   # not the 60 s deadline


def test_a_run_with_a_hung_rank_is_started_again_once(monkeypatch):
    from autograd_lab.labs import distributed

    stuck = distributed.DistributedRun(world_size=2, results={0: {}}, terminated=[1])
    good = distributed.DistributedRun(world_size=2, results={0: {}, 1: {}})
    runs = [stuck, good]
    monkeypatch.setattr(distributed, "_launch_once", lambda *args: runs.pop(0))
    run = distributed.launch(scenarios.ddp_step, world_size=2)
    assert run.ok and run.restarts == 1 and runs == []
    # a rank that failed is a result to show, never a reason to run again
    failed = distributed.DistributedRun(world_size=2, errors={0: ("RuntimeError", "x")}, terminated=[1])
    monkeypatch.setattr(distributed, "_launch_once", lambda *args: failed)
    assert distributed.launch(scenarios.ddp_step, world_size=2).restarts == 0


# --- functions written in a notebook, and answers checked on real ranks ---------------------

def test_a_shipped_function_keeps_its_globals_closure_defaults_and_lines():
    import pickle
    import subprocess
    import sys

    from autograd_lab.labs import shipping

    namespace = {"__name__": "__main__"}
    exec(compile("import math\nSCALE = 3\n"
                 "def helper(x):\n    return x * SCALE\n"
                 "def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\n"
                 "def make_adder(k):\n    def add(x):\n        return x + k\n    return add\n"
                 "adder = make_adder(5)\n"
                 "def answer(x, y=2, *, z=4):\n    return helper(x) + fact(4) + adder(y) + z + math.floor(1.5)\n"
                 "def broken(x):\n    return undefined_name + x\n", "<cell>", "exec"), namespace)
    program = ("import sys, pickle; from autograd_lab.labs import shipping\n"
               "answer, broken = (shipping.loads(d) for d in pickle.loads(sys.stdin.buffer.read()))\n"
               "print(answer(1))\n"
               "try:\n    broken(1)\nexcept NameError as error:\n    print(error)\n")
    data = pickle.dumps([shipping.dumps(namespace["answer"]), shipping.dumps(namespace["broken"])])
    fresh = subprocess.run([sys.executable, "-c", program], input=data, capture_output=True, timeout=120)
    assert fresh.stdout.decode().split("\n")[:2] == ["39", "name 'undefined_name' is not defined"], fresh.stderr
    lock = __import__("threading").Lock()
    namespace["LOCK"] = lock
    exec(compile("def uses_lock():\n    return LOCK\n", "<cell>", "exec"), namespace)
    with pytest.raises(shipping.NotShippable, match="LOCK"):
        shipping.dumps(namespace["uses_lock"])


def test_an_answer_checked_on_ranks_reports_what_each_rank_did():
    import torch.nn as nn

    from autograd_lab.labs.ddp_check import on_ranks

    def sync_first(model, micro_batches):
        for step, (x, y) in enumerate(micro_batches):
            if step == 0:
                F.mse_loss(model(x), y).backward()
            else:
                with model.no_sync():
                    F.mse_loss(model(x), y).backward()

    torch.manual_seed(0)
    module = nn.Linear(3, 2)
    batches = [[(torch.randn(n, 3), torch.randn(n, 2)) for n in (3, 1)] for _ in range(2)]
    seen = on_ranks(sync_first, module, batches)
    assert seen["forward_rows"] == [[1, 3], [1, 3]] and seen["backward_passes"] == [2, 2]   # smallest first
    assert seen["around_ddp"] == [0, 0] and seen["sync_turned_off"] == [True, True]
    assert seen["allreduced_after_forward"] == [[1], [1]]                # synchronised after the first forward
    assert not torch.allclose(seen["grads"][0]["weight"], seen["grads"][1]["weight"])   # the ranks disagree

    def raises(model, micro_batches):
        return torch.cat(micro_batches[0])               # (3, 3) and (3, 2): sizes differ
    with pytest.raises(RuntimeError, match=r"\(line \d+: `return torch.cat\(micro_batches\[0\]\).*\(on rank 0\)"):
        on_ranks(raises, module, batches)

    def stub(model, micro_batches):
        raise NotImplementedError
    with pytest.raises(NotImplementedError):
        on_ranks(stub, module, batches)


def test_the_checks_clock_runs_for_the_answer_not_for_starting_the_ranks():
    """The check's clock is CPU time (``ITIMER_PROF``, as ``checking.hermetic.deadline``): paused while the ranks
    start, charged with what the answer used on them.  A wall-clock alarm here made the test depend on how fast
    two ranks start (it failed on a loaded machine) and, firing inside ``launch``, left the ranks running."""
    import signal
    import time

    import torch.nn as nn

    from autograd_lab.labs.ddp_check import on_ranks

    class Alarm(BaseException):
        pass

    def forever(model, micro_batches):
        while True:
            sum(range(1000))

    def quick(model, micro_batches):
        for x, y in micro_batches:
            F.mse_loss(model(x), y).backward()

    def ring(signum, frame):
        raise Alarm()

    batches = [[(torch.randn(2, 3), torch.randn(2, 2))] for _ in range(2)]
    previous = signal.signal(signal.SIGPROF, ring)
    try:
        signal.setitimer(signal.ITIMER_PROF, 1.5)
        on_ranks(quick, nn.Linear(3, 2), batches)        # paused while the ranks start: no alarm
        left, _ = signal.setitimer(signal.ITIMER_PROF, 0)
        assert 1.0 < left <= 1.51                        # the timer's own rounding: 1.500325 seen
        signal.setitimer(signal.ITIMER_PROF, 1.5)
        with pytest.raises(Alarm):                       # the answer ran out of its 1.5 s on the ranks
            on_ranks(forever, nn.Linear(3, 2), batches)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_a_launch_interrupted_while_its_ranks_run_stops_them(monkeypatch):
    """Ctrl-C (or any exception) while ``launch`` waits for its ranks stops them: left running, they worked on for
    the kernel's life and every later check found them ("another process was running": correct 01 and 06 answers
    failed in CI, checked in the pytest worker after an interrupted launch)."""
    from autograd_lab.checking import tape
    from autograd_lab.labs import distributed

    def interrupted(run, outbox, processes, **limits):
        assert all(process.is_alive() for process in processes)
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launch(scenarios.initial_weights, timeout=120)
    assert tape._processes_at_work() == []

"""Run real ``torch.distributed`` code on local CPU processes, safely from a notebook.

Lab 08 trains with real DDP on the gloo backend.  ``launch`` starts one
process per rank (forked from a server process that imported torch once, or
spawned where the OS has no ``forkserver``), joins them and hands back what
each rank returned::

    run = launch(ddp_step, world_size=2, batch_per_rank=4, reduction="mean")
    run.results[0]["grads"]        # rank 0's gradients after the all-reduce

Three rules keep a demonstration from ever hanging or leaking:

* networking is loopback only: the rendezvous listens on 127.0.0.1 and gloo
  is bound to the loopback interface;
* every collective has a timeout (``collective_timeout``), so a rank waiting
  for a peer that never comes raises instead of blocking forever;
* ``launch`` itself has a deadline: ranks still alive after it are terminated,
  then killed, and always joined.

A worker ("scenario") is a function ``scenario(rank, world_size, **kwargs) -> dict``
that may use the process group.  One defined in an importable module travels by
name; one written in a notebook travels by value (``shipping``), which a plain
``spawn`` cannot do.
"""

import io
import logging
import os
import queue
import re
import socket
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import shipping

LOOPBACK = "127.0.0.1"
_SOURCE_LOCATION = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*")
# forkserver imports torch once and forks each rank from there (fast); spawn elsewhere.
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_PRELOAD = ["autograd_lab.labs.ddp_scenarios", "torch._dynamo"]


class RankError(RuntimeError):
    """An exception raised inside a rank, re-raised in the notebook with the rank's message."""


@dataclass
class DistributedRun:
    """What ``launch`` observed: per-rank results, errors and how the run ended."""

    world_size: int
    results: dict = field(default_factory=dict)   # rank -> the dict the scenario returned
    errors: dict = field(default_factory=dict)    # rank -> (exception type name, message)
    terminated: list = field(default_factory=list)  # ranks stopped by launch after the deadline
    seconds: float = 0.0
    ended_by: str = "reports"  # "reports", "grace" (after a failure), "straggler", "deadline" or "deaths"
    restarts: int = 0   # runs started again because a rank hung after its peers finished

    @property
    def ok(self):
        return not self.errors and not self.terminated and len(self.results) == self.world_size

    def raise_errors(self):
        """Re-raise the first rank's error as ``RankError`` (message unchanged), for ``expect_error``."""
        for rank in sorted(self.errors):
            _, message = self.errors[rank]
            raise RankError(message)
        if self.terminated:
            raise RankError(f"ranks {self.terminated} did not finish before the deadline")


def loopback_interface():
    """Name of the loopback network interface ("lo" on Linux, "lo0" on macOS)."""
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    raise RuntimeError("No loopback network interface found; torch.distributed needs one for local runs.")


def free_port():
    """A TCP port on 127.0.0.1 that is free right now, for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def single_process_group():
    """Make this process a gloo group of one (world size 1), once; used to check DDP code in-process.

    The rendezvous is an in-memory store: nothing listens on the network and no
    file or folder is left behind.
    """
    if not dist.is_initialized():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


@contextmanager
def recorded_log(name):
    """Keep the messages of logger ``name`` in a list instead of printing them (to stderr)."""
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, propagate = Keep(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


_NCCL_TIMEOUT_SOURCE = re.compile(
    r"kProcessGroupNCCLDefaultTimeout\s*=\s*std::chrono::milliseconds\(([\d\s*]+)\)")


def nccl_default_timeout():
    """NCCL's default process-group timeout, also on a build of torch without NCCL.

    A build with NCCL exposes it as ``torch.distributed.constants.default_pg_nccl_timeout``;
    a CPU-only build sets that to ``None``, but still ships the C++ header that defines
    it (``kProcessGroupNCCLDefaultTimeout`` in ``ProcessGroupNCCL.hpp``), so read it there.
    Returns ``(timedelta, where it was read)``.
    """
    from torch.distributed.constants import default_pg_nccl_timeout

    if default_pg_nccl_timeout is not None:
        return default_pg_nccl_timeout, "torch.distributed.constants.default_pg_nccl_timeout"
    header = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "distributed",
                          "c10d", "ProcessGroupNCCL.hpp")
    with open(header) as source:
        match = _NCCL_TIMEOUT_SOURCE.search(source.read())
    if match is None:
        raise RuntimeError(f"kProcessGroupNCCLDefaultTimeout not found in {header}")
    milliseconds = 1
    for factor in match.group(1).split("*"):
        milliseconds *= int(factor)
    return timedelta(milliseconds=milliseconds), "kProcessGroupNCCLDefaultTimeout in ProcessGroupNCCL.hpp"


def _worker(rank, world_size, port, collective_timeout, scenario, kwargs, outbox):
    """Entry point of one spawned rank: join the group, run the scenario, report, leave."""
    os.environ["MASTER_ADDR"] = LOOPBACK
    os.environ["MASTER_PORT"] = str(port)
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    torch.set_num_threads(1)  # two ranks on a 2-core laptop: one thread each
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=collective_timeout))
        outbox.put((rank, "ok", _to_bytes(scenario(rank, world_size, **kwargs))))
    except Exception as error:  # reported to the parent, which decides what to show
        outbox.put((rank, "error", (type(error).__name__, rank_message(error))))
    finally:
        if dist.is_initialized():
            # After a failed collective the group may be unusable; never let the exit wait on it.
            try:
                dist.destroy_process_group()
            except Exception:
                traceback.print_exc()


def _run_shipped(rank, world_size, shipped, kwargs):
    return shipping.loads(shipped)(rank, world_size, **kwargs)


def _to_bytes(result):
    # Tensors sent through a multiprocessing queue travel as shared-memory file
    # descriptors, which die with the rank; bytes outlive it.
    buffer = io.BytesIO()
    torch.save(result, buffer)
    return buffer.getvalue()


def _from_bytes(payload):
    return torch.load(io.BytesIO(payload), weights_only=True)


# What gloo raises in a rank that waits in a collective when its peer has gone (the peer's process
# returned, exited or crashed): the TCP connection to that peer ended.  How this rank sees the end
# depends on timing, not on the release: its read finds the end of the stream ("Connection closed
# by peer [addr]:port"); or the peer closed its socket with bytes this rank had sent still unread,
# and its kernel answered with a reset ("Read error [addr]:port: Connection reset by peer", seen on
# 2.15.0 under load); or a write meets the ended connection ("writev [addr]:port: Broken pipe" or
# "... Connection reset by peer"); or a later call finds the connection already closed ("Socket
# closed [addr]:port").  Every one names the peer's address and comes at once, not after the
# group's timeout ("Timed out waiting ...").  Messages are gloo's third_party/gloo/.../tcp/pair.cc,
# in 2.5.1, 2.13.0 and 2.15.0 (the later two may add "This is typically caused by ..." to a read error).
PEER_LEFT = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|Socket closed")


def rank_message(error):
    """The message, without gloo's "[path/to/file.cc:123] " prefixes (they change per build); every line kept."""
    text = str(error).strip()
    return "\n".join(_SOURCE_LOCATION.sub("", line) for line in text.splitlines()) if text else type(error).__name__


# Ranks leave a scenario's last collective together; one still silent this long after a
# peer reported its result is stuck, not slow.
STRAGGLER_SECONDS = 15.0


def launch(scenario, *, world_size=2, timeout=180.0, collective_timeout=30.0, grace=2.0, **kwargs):
    """Run ``scenario(rank, world_size, **kwargs)`` on ``world_size`` local gloo ranks.

    Returns a ``DistributedRun``.  ``timeout`` bounds the whole run (a safety net: a run
    takes seconds).  Once one rank has failed, the others get ``grace`` seconds to finish
    before they are stopped (a peer stuck in a collective would otherwise wait for its own
    ``collective_timeout``).  ``kwargs`` must be picklable.

    A run in which some ranks returned their result and the others stayed silent for
    ``STRAGGLER_SECONDS`` is started again, once (``run.restarts``): with torch 2.5.1's gloo
    a rank now and then hangs after the scenario's last collective (measured: 1 run in 12 of
    ``accumulate`` on 2.5.1+cu124, none in 25 on 2.13.0+cpu).
    """
    if not callable(scenario):
        raise TypeError(f"launch() needs a function scenario(rank, world_size, **kwargs), got {type(scenario).__name__}.")
    if not shipping.findable(scenario):   # written in a notebook: its code travels by value
        scenario, kwargs = _run_shipped, {"shipped": shipping.dumps(scenario), "kwargs": kwargs}
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}.")
    run = _launch_once(scenario, world_size, timeout, collective_timeout, grace, kwargs)
    if run.results and run.terminated and not run.errors:
        run = _launch_once(scenario, world_size, timeout, collective_timeout, grace, kwargs)
        run.restarts = 1
    return run


def _launch_once(scenario, world_size, timeout, collective_timeout, grace, kwargs):
    context = _context()
    outbox = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=_worker, daemon=True,
                        args=(rank, world_size, port, collective_timeout, scenario, kwargs, outbox))
        for rank in range(world_size)
    ]
    start = time.monotonic()
    run = DistributedRun(world_size=world_size)
    try:
        for process in processes:
            process.start()
        if START_METHOD == "forkserver":
            from multiprocessing import util
            _remove_when_this_process_ends(util.get_temp_dir())  # the forkserver's folder, made by now
        _collect(run, outbox, processes, deadline=start + timeout, grace=grace)
    finally:
        # Also when the wait is interrupted (Ctrl-C, an alarm): ranks left running would work on for the
        # kernel's life, and every later check would find them ("another process was running").
        _stop(run, [process for process in processes if process.pid is not None])
    run.seconds = time.monotonic() - start
    return run


def _context():
    context = mp.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        # Effective only before the server starts (the first launch): every later
        # rank is forked with these already imported, instead of importing them again.
        # DDP's constructor imports torch._dynamo lazily (~800 modules, seconds per rank).
        context.set_forkserver_preload(_PRELOAD)
    return context


# The forkserver listens on a socket in multiprocessing's temp folder (pymp-*), which the
# process that made it removes at exit.  A Jupyter kernel does not get there: at shutdown
# ipykernel signals its process group with SIGTERM until every child is gone, the resource
# tracker ignores SIGTERM, and jupyter_client kills the kernel after 5 s, before any exit
# handler runs (seen: a pymp-* folder left by every run of notebook 08).  So a watcher, in
# its own session (out of the signalled group), waits on a pipe for this process to end,
# however it ends, and removes the folder then.
_WATCHER = "import os, shutil, sys; os.read(0, 1); shutil.rmtree(sys.argv[1], ignore_errors=True)"
_watched = {}  # folder -> (watcher, the pipe's write end, held open until this process ends)


def _remove_when_this_process_ends(folder):
    if folder in _watched:
        return
    read_end, write_end = os.pipe()
    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, folder], stdin=read_end,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(read_end)
    _watched[folder] = (watcher, write_end)


def _collect(run, outbox, processes, *, deadline, grace):
    """Read rank reports until every rank reported, the deadline passed, or a failure's grace ran out."""
    straggler = STRAGGLER_SECONDS
    limit = "deadline"   # which limit the current deadline is: a test reads it instead of timing the run
    while len(run.results) + len(run.errors) < run.world_size:
        if run.errors and grace != float("inf"):
            if time.monotonic() + grace < deadline:
                deadline, limit = time.monotonic() + grace, "grace"
            grace = float("inf")  # start the grace period once, at the first failure
        elif run.results and not run.errors and straggler != float("inf"):
            if time.monotonic() + straggler < deadline:
                deadline, limit = time.monotonic() + straggler, "straggler"
            straggler = float("inf")  # once, at the first result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.ended_by = limit
            return
        try:
            rank, status, payload = outbox.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            if not any(p.is_alive() for p in processes) and outbox.empty():
                run.ended_by = "deaths"  # every rank died without reporting (for example killed by the OS)
                return
            continue
        if status == "ok":
            run.results[rank] = _from_bytes(payload)
        else:
            run.errors[rank] = payload


def _stop(run, processes):
    """Join every rank; terminate, then kill, the ones that are still running."""
    for rank, process in enumerate(processes):
        process.join(timeout=5.0 if rank in run.results or rank in run.errors else 0.1)
        if process.is_alive():
            if rank not in run.results and rank not in run.errors:
                run.terminated.append(rank)
            process.terminate()
            process.join(timeout=5.0)
        if process.is_alive():
            process.kill()
            process.join()

"""One sandboxed Jupyter kernel, driven cell by cell over its own message channels.

``SandboxedKernel.run(code, timeout)`` sends one execute request and returns a
``Run``: how it ended, a capped copy of what it printed, and the data it
displayed, keyed by MIME type.  Only messages answering *this* request count.

How a run can end:

* ``ok`` / ``error``: the kernel answered; ``error`` holds the exception line;
* ``timed out``: the time was up, the kernel was interrupted and answered, so it
  can go on with the next cell;
* ``unresponsive``: even the interrupt did not bring it back (a loop that
  swallows ``KeyboardInterrupt``);
* ``dead``: the kernel process ended (``os._exit``, a crash), or the sandbox hit
  its memory or task limit (``error`` says which).

The last two are fatal: the caller must throw this kernel away.

Verdicts do not depend on how busy the machine is.  Time is the sandbox's CPU
time (its cgroup's, or its process tree's where there is none), so a cell that
runs on a saturated machine is not cut short; only a cell that waits without
computing is stopped on the wall clock, after ``WALL_FACTOR`` times its
timeout.  Memory and task limits are read from the kernel's own counters
(``limits.Events``) after the fact: a cell during which the kernel killed a
process for memory, or refused a fork or a thread, is ``dead`` whether or not
the kernel process itself survived.
"""

import os
import signal
import time
from dataclasses import dataclass, field
from queue import Empty

import zmq
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from .limits import Events
from .sandbox import KERNEL_NAME
from .watchdog import Watchdog, cpu_seconds, kill_tree, tree

FATAL = ("unresponsive", "dead")
WALL_FACTOR = 3            # a run that computes nothing is stopped after this many times its timeout
_INTERRUPT_GRACE = 5.0     # CPU seconds a kernel gets to answer after the interrupt...
_INTERRUPT_WALL = 30.0     # ...or wall seconds, for one that sleeps through it
_IDLE_WAIT = 60.0          # wall seconds for the outputs after the reply (they come before "idle")
_STARTUP_WALL = 600.0      # a kernel that cannot start in this long on any machine is broken
_POLL = 0.05
_SWEEP = 1.0               # seconds between two sweeps of what a timed-out cell left running
# The kernel cannot send us one message larger than this: a flood of output
# costs the student their output, never the grader's memory.
MAX_MESSAGE_BYTES = 64 << 20


@dataclass
class Run:
    status: str = "ok"
    error: str = ""
    text: str = ""
    truncated: bool = False
    displays: dict = field(default_factory=dict)   # MIME type -> last value displayed

    def add_text(self, text, limit):
        text = safe_text(text)
        room = limit - len(self.text)
        if len(text) > room:
            self.truncated = True
        self.text += text[:max(room, 0)]


_CONTROL = {c: "?" for c in [*range(0, 9), 11, 12, *range(14, 32), *range(127, 160)]}


def safe_text(text):
    """Text from the kernel made safe to store and show: valid UTF-8 (no lone surrogates), no control codes."""
    return str(text).encode("utf-8", "replace").decode("utf-8").translate(_CONTROL)


class SandboxedKernel:
    """Context manager: a fresh kernel started in its sandbox (and cgroup) at ``place``."""

    def __init__(self, sandbox, place, output_limit=100_000, parent_group=None, pgid_log=None, number=1):
        self.sandbox = sandbox
        self.place = place
        self.output_limit = output_limit
        self.parent_group = parent_group
        self.pgid_log = pgid_log
        self.number = number
        self.group = None
        self.watchdog = None

    def __enter__(self):
        sandbox, place = self.sandbox, self.place
        sandbox.prepare(place)
        if sandbox.cgroups.enabled:
            self.group = sandbox.cgroups.group(f"kernel{self.number}", memory_mb=sandbox.memory_mb,
                                               tasks=sandbox.max_processes, parent=self.parent_group)
        sandbox.write_kernelspec(place, wrap=self.group.wrap if self.group else None)
        specs = KernelSpecManager(kernel_dirs=[place.spec_folder], ensure_native_kernel=False)
        # IPC sockets in a folder of the kernel's own: the sandbox has no network to reach us over
        # TCP, and no other local process can reach these.
        self.manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                                     ip=os.path.join(place.ipc_folder, "kernel"))
        # Written by us, in a folder the kernel cannot write (no symlink tricks).
        self.manager.connection_file = os.path.join(place.spec_folder, "connection.json")
        self.manager.write_connection_file()
        if sandbox.drops_privileges:
            os.chown(self.manager.connection_file, place.uid, place.uid)
        self.manager.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.manager.start_kernel(cwd=place.folder, env=sandbox.environment(place))
        self.pid = self.manager.provisioner.process.pid
        if self.group is not None and hasattr(self.group, "attach"):
            self.group.attach(self.pid)
        if self.group is None:
            self.watchdog = Watchdog(self.pid, sandbox.memory_mb, sandbox.max_processes).__enter__()
        if self.pgid_log:
            # The kernel leads its own process group; the batch kills that group even if we die.
            with open(self.pgid_log, "a") as file:
                file.write(f"{self.manager.provisioner.pgid}\n")
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=_STARTUP_WALL)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info):
        if self.watchdog is not None:
            self.watchdog.__exit__(None, None, None)
        if hasattr(self, "client"):
            self.client.stop_channels()
        try:
            self.manager.shutdown_kernel(now=True)
        except Exception:  # already gone is fine
            pass
        if self.group is not None:
            self.group.remove()      # every process the submission started, daemons included
        elif hasattr(self, "pid"):
            kill_tree(self.pid)
        return False

    def alive(self):
        return self.manager.is_alive()

    def cpu_seconds(self):
        """CPU time used so far by everything in this sandbox."""
        if self.group is not None:
            return self.group.cpu_seconds()
        return cpu_seconds(tree(self.pid))

    def kernel_pid(self):
        """The ipykernel process itself (below bwrap and its init), seen from outside the sandbox."""
        for pid in tree(self.pid):   # parents come before their children: the first is the kernel
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    if file.read().split(b"\0")[1:3] == [b"-m", b"ipykernel_launcher"]:
                        return pid
            except OSError:
                continue
        return None

    def kill_strays(self):
        """Kill every process below the kernel, with the sandbox frozen so that none can fork meanwhile."""
        kernel = self.kernel_pid()
        if kernel is None:
            return
        frozen = self.group is not None and self.group.freeze(True)
        try:
            for pid in tree(kernel)[1:]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        finally:
            if frozen:
                self.group.freeze(False)
        kill_tree(kernel, spare_root=True)   # without a freezer: again, until none is left

    def events(self):
        return self.group.events() if self.group is not None else Events()

    def run(self, code, timeout, *, store_history=True):
        """Execute ``code`` with ``timeout`` CPU seconds (``WALL_FACTOR`` times that on the wall clock)."""
        run = Run()
        before = self.events()
        msg_id = self.client.execute(code, store_history=store_history, allow_stdin=False, stop_on_error=False)
        clock = _Budget(self.cpu_seconds, timeout, timeout * WALL_FACTOR)
        interrupted, reply, idle, next_sweep = False, None, False, 0.0
        while reply is None or not idle:
            if reply is None and clock.spent():
                if interrupted:
                    run.status = "unresponsive"
                    return run
                # The cell is over: what it left running (a fork bomb's children) goes first, so the
                # kernel alone decides how it answers the interrupt.
                self.kill_strays()
                self.manager.interrupt_kernel()
                interrupted = True
                clock = _Budget(self.cpu_seconds, _INTERRUPT_GRACE, _INTERRUPT_WALL)
            elif reply is not None and clock.spent():
                break  # the answer came; some outputs were lost (an oversized message)
            if interrupted and reply is None and time.monotonic() > next_sweep:
                self.kill_strays()   # a loop that forks must not regrow while the kernel answers
                next_sweep = time.monotonic() + _SWEEP
            idle = self._drain_output(msg_id, run) or idle
            if reply is None:
                reply = self._reply_to(msg_id)
                if reply is not None:
                    clock = _Budget(self.cpu_seconds, None, _IDLE_WAIT)
            if self._limit_hit(run, before):
                return run
            if reply is None and not self.alive():
                run.status = "dead"
                run.error = self._why_dead(before)
                return run
        if self._limit_hit(run, before):
            return run
        content = reply["content"]
        if interrupted:
            run.status = "timed out"
        elif content.get("status") == "error":
            run.status = "error"
            run.error = safe_text(f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"[:500])
        return run

    def _limit_hit(self, run, before):
        """True (and ``run`` made ``dead``) when the kernel enforced a limit on this sandbox during the run."""
        happened = self.events().since(before)
        if not (happened.oom_kills or happened.task_refusals):
            return False
        if self.group is not None:
            self.group.kill()
        run.status, run.error = "dead", self._limit_text(happened)
        return True

    def _limit_text(self, happened):
        if happened.oom_kills:
            return (f"the sandbox was stopped because it used more than {self.sandbox.memory_mb} MiB of memory "
                    "(all its processes together, files in its tmpfs included)")
        return (f"the sandbox was stopped because it tried to run more than {self.sandbox.max_processes} "
                "processes and threads at once")

    def _why_dead(self, before):
        happened = self.events().since(before)
        if happened.oom_kills or happened.task_refusals:
            return self._limit_text(happened)
        if self.watchdog is not None and self.watchdog.reason:
            return f"the sandbox was stopped because {self.watchdog.reason}"
        return ""

    def _reply_to(self, msg_id):
        try:
            message = self.client.get_shell_msg(timeout=0)
        except Empty:
            return None
        return message if message["parent_header"].get("msg_id") == msg_id else None

    def _drain_output(self, msg_id, run):
        """Read the kernel's output messages for a moment; True once it reports idle."""
        try:
            message = self.client.get_iopub_msg(timeout=_POLL)
        except Empty:
            return False
        if message["parent_header"].get("msg_id") != msg_id:
            return False
        kind, content = message["msg_type"], message["content"]
        if kind == "status":
            return content.get("execution_state") == "idle"
        if kind == "stream":
            run.add_text(str(content.get("text", "")), self.output_limit)
        elif kind in ("display_data", "execute_result"):
            data = content.get("data", {})
            if isinstance(data, dict):
                run.displays.update(data)
                run.add_text(str(data.get("text/plain", "")) + "\n", self.output_limit)
        elif kind == "error":
            run.add_text(f"{content.get('ename')}: {content.get('evalue')}\n", self.output_limit)
        return False


class _Budget:
    """Spent when ``cpu`` seconds of the sandbox's CPU time, or ``wall`` seconds, have passed."""

    def __init__(self, read_cpu, cpu, wall):
        self.read_cpu, self.cpu, self.wall = read_cpu, cpu, wall
        self.cpu_start = read_cpu() if cpu is not None else 0.0
        self.wall_end = time.monotonic() + wall

    def spent(self):
        if time.monotonic() > self.wall_end:
            return True
        return self.cpu is not None and self.read_cpu() - self.cpu_start > self.cpu

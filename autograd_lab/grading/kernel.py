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
* ``dead``: the kernel process ended (``os._exit``, a crash), or the watchdog
  killed the sandbox for its memory or process count (``error`` says which).

The last two are fatal: the caller must throw this kernel away.
"""

import os
import time
from dataclasses import dataclass, field
from queue import Empty

import zmq
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from .sandbox import KERNEL_NAME
from .watchdog import Watchdog

FATAL = ("unresponsive", "dead")
_INTERRUPT_GRACE = 5.0   # seconds a kernel gets to answer after the interrupt
_IDLE_GRACE = 2.0        # seconds to wait for the last outputs after the reply
_POLL = 0.05
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
        room = limit - len(self.text)
        if len(text) > room:
            self.truncated = True
        self.text += text[:max(room, 0)]


class SandboxedKernel:
    """Context manager: a fresh kernel started through the sandbox's launcher in ``home``."""

    def __init__(self, sandbox, spec_folder, home, output_limit=100_000, startup_timeout=120, pgid_log=None):
        self.sandbox = sandbox
        self.pgid_log = pgid_log
        self.spec_folder = spec_folder
        self.home = home
        self.output_limit = output_limit
        self.startup_timeout = startup_timeout

    def __enter__(self):
        self.sandbox.write_kernelspec(self.spec_folder, self.home)
        specs = KernelSpecManager(kernel_dirs=[self.spec_folder], ensure_native_kernel=False)
        # IPC sockets in the kernel's own folder: the sandbox has no network to reach us over
        # TCP, and no other local process can reach these.
        self.manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                                     ip=os.path.join(self.home, ".kernel"))
        # Written by us, so it lives in a folder the kernel cannot write (no symlink tricks).
        self.manager.connection_file = os.path.join(self.spec_folder, "connection.json")
        self.manager.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.manager.start_kernel(cwd=self.home, env=self.sandbox.environment(self.home))
        self.watchdog = Watchdog(self.manager.provisioner.process.pid, self.sandbox.memory_mb,
                                 self.sandbox.max_processes).__enter__()
        if self.pgid_log:
            # The kernel leads its own process group; the batch kills that group even if we die.
            with open(self.pgid_log, "a") as file:
                file.write(f"{self.manager.provisioner.pgid}\n")
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=self.startup_timeout)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info):
        self.watchdog.__exit__(None, None, None)
        self.client.stop_channels() if hasattr(self, "client") else None
        try:
            self.manager.shutdown_kernel(now=True)
        except Exception:  # already gone is fine
            pass
        return False

    def alive(self):
        return self.manager.is_alive()

    def run(self, code, timeout, *, store_history=True):
        """Execute ``code`` and wait at most ``timeout`` seconds (plus the interrupt's grace)."""
        run = Run()
        msg_id = self.client.execute(code, store_history=store_history,
                                     allow_stdin=False, stop_on_error=False)
        deadline = time.monotonic() + timeout
        interrupted = False
        reply = None
        idle = False
        while reply is None or not idle:
            now = time.monotonic()
            if now > deadline:
                if reply is not None:
                    break  # the answer came; some outputs were lost (an oversized message)
                if interrupted:
                    run.status = "unresponsive"
                    return run
                self.manager.interrupt_kernel()
                interrupted = True
                deadline = now + _INTERRUPT_GRACE
            idle = self._drain_output(msg_id, run) or idle
            if reply is None:
                reply = self._reply_to(msg_id)
                if reply is not None:
                    deadline = min(deadline, time.monotonic() + _IDLE_GRACE)
            if reply is None and not self.alive():
                run.status = "dead"
                run.error = f"the sandbox was stopped because {self.watchdog.reason}" if self.watchdog.reason else ""
                return run
        content = reply["content"]
        if interrupted:
            run.status = "timed out"
        elif content.get("status") == "error":
            run.status = "error"
            run.error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"[:500]
        return run

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
            run.add_text(content.get("text", ""), self.output_limit)
        elif kind in ("display_data", "execute_result"):
            data = content.get("data", {})
            run.displays.update(data)
            run.add_text(str(data.get("text/plain", "")) + "\n", self.output_limit)
        elif kind == "error":
            run.add_text(f"{content.get('ename')}: {content.get('evalue')}\n", self.output_limit)
        return False

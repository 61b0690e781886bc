"""What the student's kernel may do: its limits, its user, its environment.

``Sandbox`` is decided once per batch (``Sandbox.for_this_machine``) and then
used for every submission: it writes the kernelspec that starts the kernel
through ``launcher.py``, builds the kernel's environment from scratch (nothing
of the grader's environment leaks in), and cleans up every process the kernel
left behind.
"""

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

KERNEL_NAME = "autograd-lab-sandbox"
# Numeric users without a passwd entry: one per submission, so kernels cannot touch each other.
FIRST_SANDBOX_UID = 231_000
_PROBE_UID = FIRST_SANDBOX_UID - 1


@dataclass(frozen=True)
class Sandbox:
    memory_mb: int = 2048
    file_mb: int = 64
    drop_privileges: bool = False
    python: str = sys.executable
    why_not_dropped: str = ""

    @classmethod
    def for_this_machine(cls, memory_mb=2048, file_mb=64, python=sys.executable):
        """Drop privileges when running as root and an unprivileged user can run ``python``."""
        if os.geteuid() != 0:
            return cls(memory_mb, file_mb, False, python,
                       "the grader does not run as root, so the kernel runs as the same user")
        problem = _unprivileged_python_problem(python)
        if problem:
            return cls(memory_mb, file_mb, False, python,
                       f"an unprivileged user cannot run {python} ({problem}); the kernel runs as root")
        return cls(memory_mb, file_mb, True, python)

    def uid_for(self, slot):
        """The sandbox user of submission number ``slot`` (None when privileges are kept)."""
        return FIRST_SANDBOX_UID + slot if self.drop_privileges else None

    def describe(self):
        user = ("a numeric user of its own per submission" if self.drop_privileges
                else f"the grader's user, because {self.why_not_dropped}")
        return (f"kernel limits: {self.memory_mb} MiB address space, files up to {self.file_mb} MiB; "
                f"kernel user: {user}")

    def write_kernelspec(self, folder, uid):
        """A kernelspec in ``folder`` whose argv starts ipykernel through the launcher."""
        limits = ["--memory-mb", str(self.memory_mb), "--file-mb", str(self.file_mb)]
        if uid is not None:
            limits += ["--uid", str(uid), "--gid", str(uid)]
        argv = [self.python, "-m", "autograd_lab.grading.launcher", *limits, "--",
                self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        spec_dir = os.path.join(folder, KERNEL_NAME)
        os.makedirs(spec_dir, exist_ok=True)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as file:
            json.dump({"argv": argv, "display_name": "autograd-lab sandbox", "language": "python"}, file)
        return folder


def kernel_environment(home, python=sys.executable):
    """The kernel's whole environment: graded mode on, one thread, everything written under ``home``."""
    return {
        "PATH": os.path.dirname(python) + ":/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "IPYTHONDIR": os.path.join(home, ".ipython"),
        "MPLCONFIGDIR": os.path.join(home, ".matplotlib"),
        "MPLBACKEND": "Agg",
        "LANG": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        # Several kernels share the machine: one thread each keeps --jobs meaningful.
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "AUTOGRAD_LAB_GRADING": "1",
    }


def _unprivileged_python_problem(python):
    """Why the sandbox user cannot start ``python`` with the packages we need, or ''."""
    def become_probe_user():
        os.setgroups([])
        os.setgid(_PROBE_UID)
        os.setuid(_PROBE_UID)
    try:
        probe = subprocess.run([python, "-c", "import ipykernel, torch, autograd_lab"],
                               preexec_fn=become_probe_user, capture_output=True, text=True,
                               timeout=120, env=kernel_environment("/", python), cwd="/")
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    if probe.returncode != 0:
        lines = (probe.stderr or "failed").strip().splitlines()
        return lines[-1] if lines else "failed"
    return ""


def kill_processes_of(uid):
    """SIGKILL every process owned by ``uid`` (what a sandbox kernel left running)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                os.kill(int(entry), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue

"""Where the student's kernel runs: one bubblewrap sandbox per kernel (docs/contracts.md §4).

``Sandbox.for_this_machine`` decides once per batch whether a sandbox is
possible (``bwrap`` present, user namespaces allowed, the kernel's Python able
to import torch and ipykernel inside one).  ``kernel_argv`` then wraps each
kernel in ``bwrap`` with:

* fresh user, PID, IPC, network, UTS and mount namespaces (``--unshare-all``):
  no network; a process the student starts, even a detached daemon, lives in
  the kernel's PID namespace and dies with it (``--die-with-parent``; bwrap's
  own PID 1 inside reaps orphans);
* a non-root uid inside with no capabilities;
* read-only binds of the OS (``/usr``, ``/lib*``, ``/bin``, ``/etc``), the
  Python installation and the venv, and the course package (``package_root``:
  a release build, or the repository's ``autograd_lab``; the solutions live in
  ``autograd_lab_solutions`` beside it, which is never bound);
* a private tmpfs ``/tmp`` and ``$HOME``, and the submission's work folder
  read-write (the only place it can write that outlives it).

Nothing else is visible: not the submissions, not another student's work
folder, not the grader's output.  Memory is limited for the whole sandbox by
``watchdog.py`` (resident memory of its process tree); there is no
``RLIMIT_AS``, which stops CUDA builds of torch from importing.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

KERNEL_NAME = "autograd-lab-sandbox"
INSIDE_UID = 1000
INSIDE_HOME = "/home/student"
PACKAGE_MOUNT = "/opt/autograd-lab"   # the course package is importable from here inside
INSTALL_HINT = ("Install bubblewrap, the sandbox the grader runs each submission in: "
                "`sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora), "
                "or `make setup`. It needs Linux with unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1 on older Debian). On macOS grade inside a Linux VM "
                "or container. To grade without a sandbox anyway, knowing that a submission can then read and "
                "change other students' files and grades, pass --allow-unsandboxed.")
UNSANDBOXED_WARNING = ("UNSANDBOXED: this submission ran without the bubblewrap sandbox "
                       "(--allow-unsandboxed); its code could read or change other students' files and grades")


class SandboxUnavailable(Exception):
    """No sandbox can be made on this machine; the message says why and how to fix it."""


@dataclass(frozen=True)
class Sandbox:
    memory_mb: int = 2048
    file_mb: int = 64
    python: str = sys.executable
    package_root: str = ""            # the folder that holds autograd_lab/ (repository or release)
    read_only: tuple = ()             # the Python installation and venv, bound read-only
    enabled: bool = True
    max_processes: int = 256
    extra_ro: tuple = field(default=())

    @classmethod
    def for_this_machine(cls, memory_mb=2048, file_mb=64, python=sys.executable, package_root=None,
                         allow_unsandboxed=False):
        """A working sandbox, or (only with ``allow_unsandboxed``) a disabled one; else ``SandboxUnavailable``."""
        package_root = os.path.abspath(package_root or _repository_package_root())
        problem, read_only = _probe(python, package_root, memory_mb, file_mb)
        if not problem:
            return cls(memory_mb, file_mb, python, package_root, read_only)
        if allow_unsandboxed:
            return cls(memory_mb, file_mb, python, package_root, (), enabled=False)
        raise SandboxUnavailable(f"grade refuses to run student code without a sandbox: {problem}. {INSTALL_HINT}")

    def describe(self):
        if not self.enabled:
            return UNSANDBOXED_WARNING
        return (f"bubblewrap sandbox: own PID/IPC/network/mount/user namespaces, uid {INSIDE_UID} without "
                f"capabilities, read-only course and Python, writable work folder only; "
                f"{self.memory_mb} MiB resident memory and {self.max_processes} processes for the whole "
                f"sandbox, files up to {self.file_mb} MiB")

    def kernel_argv(self, work, connection_folder):
        """The kernelspec argv: bwrap (when enabled), then the launcher, then ipykernel."""
        inner = [self.python, "-m", "autograd_lab.grading.launcher", "--file-mb", str(self.file_mb),
                 "--nproc", str(self.max_processes), "--",
                 self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        if not self.enabled:
            return inner
        return [*bwrap_prefix(self.read_only, self.package_root, work, connection_folder), *inner]

    def environment(self, work):
        home = INSIDE_HOME if self.enabled else work
        env = kernel_environment(home, self.python)
        # The package comes from the bound package root, before anything a .pth file adds.
        env["PYTHONPATH"] = PACKAGE_MOUNT if self.enabled else self.package_root
        return env

    def write_kernelspec(self, folder, work):
        """A kernelspec in ``folder`` that starts ipykernel in this sandbox, working in ``work``."""
        spec_dir = os.path.join(folder, KERNEL_NAME)
        os.makedirs(spec_dir, exist_ok=True)
        # Interrupt by message: a signal to bwrap would not reach the kernel in its own session.
        spec = {"argv": self.kernel_argv(work, folder), "display_name": "autograd-lab sandbox",
                "language": "python", "interrupt_mode": "message"}
        with open(os.path.join(spec_dir, "kernel.json"), "w") as file:
            json.dump(spec, file)
        return folder


def bwrap_prefix(read_only, package_root, work, connection_folder):
    """The ``bwrap ... --`` words that put a command in the sandbox (see the module docstring)."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/home",
            "--dir", INSIDE_HOME, "--tmpfs", "/opt"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"):
        argv += ["--ro-bind-try", path, path]
    for path in read_only:
        argv += ["--ro-bind", path, path]
    package = os.path.join(PACKAGE_MOUNT, "autograd_lab")
    argv += ["--ro-bind", os.path.join(package_root, "autograd_lab"), package]  # never autograd_lab_solutions
    argv += ["--bind", work, work, "--ro-bind", connection_folder, connection_folder,
             "--chdir", work, "--"]
    return argv


def kernel_environment(home, python=sys.executable):
    """The kernel's whole environment: graded mode on, one thread, everything written under ``home``."""
    return {
        "PATH": os.path.dirname(python) + ":/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp",
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


def _repository_package_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python_folders(python):
    """The folders the kernel's Python needs: its installation, its venv and their site-packages."""
    script = "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, *site.getsitepackages()]))"
    found = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, timeout=60, check=True)
    folders = {os.path.realpath(p) for p in json.loads(found.stdout) if os.path.isdir(p)}
    folders.add(os.path.realpath(os.path.dirname(os.path.realpath(python))))
    # Only outermost folders, and none the OS binds already cover.
    keep = sorted(f for f in folders if not any(f != o and f.startswith(o + os.sep) for o in folders))
    return tuple(f for f in keep if not f.startswith(("/usr/", "/bin/", "/lib")) and f != "/usr")


def _probe(python, package_root, memory_mb, file_mb):
    """``('', read_only)`` when a kernel can start in a sandbox here, else ``(why not, ())``."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux and this is {sys.platform}", ()
    if shutil.which("bwrap") is None:
        return "the `bwrap` program was not found", ()
    try:
        read_only = _python_folders(python)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return f"{python} could not be started ({error})", ()
    probe = Sandbox(memory_mb, file_mb, python, package_root, read_only)
    scratch = _scratch()
    argv = bwrap_prefix(read_only, package_root, scratch, scratch)
    # The kernel's imports work, and the references are out of its sight.
    check = ("import ipykernel, torch, autograd_lab, importlib.util; "
             "assert importlib.util.find_spec('autograd_lab_solutions') is None, 'the solutions are visible'")
    try:
        result = subprocess.run([*argv, python, "-c", check], capture_output=True, text=True, timeout=180,
                                env=probe.environment("/tmp"), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as error:
        return f"bwrap could not start ({error})", ()
    if result.returncode != 0:
        lines = (result.stderr or "failed").strip().splitlines()
        return f"a sandboxed Python could not start ({lines[-1] if lines else 'failed'})", ()
    return "", read_only


def _scratch():
    import tempfile
    folder = os.path.join(tempfile.gettempdir(), "autograd-lab-sandbox-probe")
    os.makedirs(folder, exist_ok=True)
    return folder

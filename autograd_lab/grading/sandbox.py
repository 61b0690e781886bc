"""Where the student's kernel runs: one sandbox per kernel (docs/contracts.md §4).

``Sandbox.for_this_machine(kind=...)`` decides once per batch what is possible:

* ``"bubblewrap"`` (the default): each kernel in its own ``bwrap``, with fresh
  PID, IPC, network, UTS and mount namespaces; no network; read-only binds of
  the OS (``/usr``, ``/lib*``, ``/bin``), of a short list of world-readable
  ``/etc`` files a kernel needs (``ETC``; never ``/etc`` itself), of the Python
  installation and venv (editable-install ``.pth`` files shown empty: they name
  host paths), and of the student build (``package_root``: no solutions);
  size-limited tmpfs ``$HOME`` (the work folder is in it), ``/tmp`` and
  ``/dev/shm``.  The grader's copy of the notebook is bound read-only and copied
  into the work folder by the launcher, so nothing the kernel writes outlives it
  and the grader never reads anything the kernel could have written.
* ``"container"``: the machine is a disposable container that is the sandbox
  (Gradescope: bwrap cannot make namespaces under Docker's default seccomp
  profile).  Needs root: each kernel runs as an unprivileged uid of its own in a
  work folder of its own, so files readable only by root (the autograder's
  source, results) are out of its reach.  Nothing else is hidden.
* ``"none"``: no isolation at all; every report says so.  What ``--allow-unsandboxed``
  falls back to where no sandbox can be made, or asked for by name (with
  ``allow_unsandboxed``) in a disposable VM.  Limits (cgroups) still apply, and
  every process the submission started is killed with its group.

Running as root, the grader never lets a kernel keep root's file access: bwrap
runs without a user namespace and the launcher switches to an unprivileged uid
(``SANDBOX_UID_BASE`` + the submission's slot) before the kernel starts.  As an
ordinary user, bwrap maps the kernel to uid 1000 inside a user namespace.

Limits for the whole sandbox (memory with tmpfs, processes and threads, CPU time)
come from the kernel's cgroups (``limits.py``) where the host allows; where it
does not, ``describe()`` says what is not enforced.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace

from .limits import Cgroups

KERNEL_NAME = "autograd-lab-sandbox"
INSIDE_UID = 1000
INSIDE_HOME = "/home/student"
INSIDE_WORK = "/home/student/work"
INSIDE_SUBMISSION = "/sandbox/submission.ipynb"
PACKAGE_MOUNT = "/opt/autograd-lab"   # the course package is importable from here inside
SANDBOX_UID_BASE = 2_100_000_000      # root grader: kernel of slot N runs as this + N (no such user exists)
KINDS = ("bubblewrap", "container", "none")
# What of /etc a kernel needs (loader cache, time zone, name service, fonts), each bound
# only if world-readable.  Never /etc itself: it holds the machine's secrets.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "host.conf", "hosts",
       "fonts", "alternatives", "mime.types", "gai.conf", "matplotlibrc")
INSTALL_HINT = ("Install bubblewrap, the sandbox the grader runs each submission in: "
                "`sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora), "
                "or `make setup`. It needs Linux with unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1 on older Debian). On macOS grade inside a Linux VM "
                "or container. To grade without a sandbox anyway, knowing that a submission can then read and "
                "change other students' files and grades, pass --allow-unsandboxed.")
UNSANDBOXED_WARNING = ("UNSANDBOXED: this submission ran without the bubblewrap sandbox "
                       "(--allow-unsandboxed); its code could read or change other students' files and grades")
ROOT_NOTE = ("the grader runs as root: each kernel was switched to an unprivileged uid of its own "
             "before it started, so root's files are out of its reach")


class SandboxUnavailable(Exception):
    """No sandbox can be made on this machine; the message says why and how to fix it."""


@dataclass(frozen=True)
class Place:
    """One kernel's folder on the grader's side, and the uid it runs as when the grader is root."""

    folder: str
    submission: str      # the grader's private copy of the notebook
    slot: int = 0
    ipc: str = ""        # where the kernel's sockets go ("": in folder); a unix socket path has 107 bytes at most

    @property
    def spec_folder(self):
        return os.path.join(self.folder, "spec")

    @property
    def ipc_folder(self):
        return self.ipc or os.path.join(self.folder, "ipc")

    @property
    def disk_work(self):
        """The work folder of a kernel without bwrap (``container``, ``none``)."""
        return os.path.join(self.folder, "work")

    @property
    def uid(self):
        return SANDBOX_UID_BASE + self.slot


@dataclass(frozen=True)
class Sandbox:
    kind: str = "bubblewrap"
    memory_mb: int = 2048
    file_mb: int = 64
    disk_mb: int = 512                # each tmpfs (home and work folder, /tmp, /dev/shm)
    max_processes: int = 512          # tasks (processes and threads) of the whole sandbox
    python: str = sys.executable
    package_root: str = ""            # the folder that holds autograd_lab/ (a release build)
    read_only: tuple = ()             # the Python installation and venv, bound read-only
    masked: tuple = ()                # files in them shown empty inside (.pth files naming host paths)
    as_root: bool = False
    cgroups: Cgroups = field(default_factory=Cgroups)

    @property
    def enabled(self):
        return self.kind != "none"

    @property
    def drops_privileges(self):
        return self.as_root and self.kind in ("bubblewrap", "container")

    @classmethod
    def for_this_machine(cls, memory_mb=2048, file_mb=64, python=sys.executable, package_root=None,
                         allow_unsandboxed=False, kind="bubblewrap", disk_mb=512, cgroups=None):
        """A working sandbox of ``kind``, or (only with ``allow_unsandboxed``) none; else ``SandboxUnavailable``."""
        if kind not in KINDS or (kind == "none" and not allow_unsandboxed):
            raise ValueError(f"sandbox kind must be one of {KINDS[:2]} ('none' only with allow_unsandboxed), "
                             f"got {kind!r}")
        package_root = os.path.abspath(package_root or _repository_package_root())
        cgroups = cgroups if cgroups is not None else Cgroups.for_this_machine()
        base = cls(kind, memory_mb, file_mb, disk_mb, python=python, package_root=package_root,
                   as_root=os.geteuid() == 0, cgroups=cgroups)
        if kind == "none":   # asked for: a disposable VM or container, where isolation is not needed
            return base
        problem, sandbox = _probe_once(base)
        if not problem:
            return sandbox
        if allow_unsandboxed:
            return replace(base, kind="none")
        cgroups.remove()
        hint = INSTALL_HINT if kind == "bubblewrap" else "The container kind needs Linux and root."
        raise SandboxUnavailable(f"grade refuses to run student code without a sandbox: {problem}. {hint}")

    def describe(self):
        limits = (f"{self.memory_mb} MiB of memory (tmpfs included) and {self.max_processes} processes and "
                  f"threads for the whole sandbox: {self.cgroups.describe()}")
        if not self.cgroups.enabled:
            limits += ("; instead a watchdog polls the memory of its processes (tmpfs not counted) and "
                       "RLIMIT_NPROC limits processes per uid")
        if self.kind == "none":
            return f"{UNSANDBOXED_WARNING}; {limits}"
        if self.kind == "container":
            what = ("container sandbox: the container itself isolates the grader; each kernel runs as an "
                    "unprivileged uid of its own in a folder of its own")
        else:
            who = "an unprivileged uid of its own" if self.as_root else f"uid {INSIDE_UID} in a user namespace"
            what = (f"bubblewrap sandbox: own PID/IPC/network/mount namespaces, {who} without capabilities, "
                    f"read-only course and Python, only the /etc files a kernel needs, tmpfs home, work "
                    f"folder, /tmp and /dev/shm of {self.disk_mb} MiB each")
        root = f"; {ROOT_NOTE}" if self.drops_privileges else ""
        return f"{what}; {limits}; files up to {self.file_mb} MiB{root}"

    def warnings(self):
        """What the console must say before grading (each also in every report via ``describe``)."""
        said = []
        if self.kind == "none":
            said.append(f"{UNSANDBOXED_WARNING}. Every report says so.")
        if not self.cgroups.enabled:
            said.append(f"limits NOT enforced by the kernel: {self.cgroups.problem}. Memory is polled (tmpfs "
                        "not counted), processes are limited per uid, and CPU time is read per process.")
        if self.as_root:
            said.append("grading as root: " + (ROOT_NOTE if self.drops_privileges else
                                               "the kernels run as root too (--allow-unsandboxed)") + ".")
        return said

    # --- one kernel --------------------------------------------------------------------------

    def prepare(self, place):
        """Make the kernel's folders on the grader's side; owned by its uid where it drops privileges."""
        for folder in (place.folder, place.spec_folder, place.ipc_folder):
            os.makedirs(folder, exist_ok=True)
        os.chmod(place.folder, 0o711)   # traversable, not listable: the kernel reaches its ipc folder only
        if self.kind != "bubblewrap":
            os.makedirs(place.disk_work, exist_ok=True)
            shutil.copyfile(place.submission, os.path.join(place.disk_work, "submission.ipynb"))
        if self.drops_privileges:
            for path in (place.ipc_folder, *([place.disk_work] if self.kind != "bubblewrap" else [])):
                _chown_tree(path, place.uid)
                os.chmod(path, 0o700)
        if self.kind == "bubblewrap":
            uid = place.uid if self.drops_privileges else INSIDE_UID
            _write(os.path.join(place.spec_folder, "passwd"), f"student:x:{uid}:{uid}:student:{INSIDE_HOME}:/bin/sh\n")
            _write(os.path.join(place.spec_folder, "group"), f"student:x:{uid}:\n")

    def work(self, place):
        """The kernel's working folder, as the kernel sees it."""
        return INSIDE_WORK if self.kind == "bubblewrap" else place.disk_work

    def kernel_argv(self, place):
        """The kernelspec argv: bwrap (for that kind), then the launcher, then ipykernel."""
        package = PACKAGE_MOUNT if self.kind == "bubblewrap" else self.package_root
        inner = [self.python, "-I", "-S", os.path.join(package, "autograd_lab", "grading", "launcher.py"),
                 "--file-mb", str(self.file_mb), "--work", self.work(place)]
        if self.kind == "bubblewrap":
            inner += ["--copy", INSIDE_SUBMISSION]
        if not self.cgroups.enabled:
            inner += ["--nproc", str(self.max_processes)]
        if self.drops_privileges:
            inner += ["--uid", str(place.uid)]
        inner += ["--", self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        if self.kind != "bubblewrap":
            return inner
        return [*self.bwrap_prefix(place), *inner]

    def bwrap_prefix(self, place):
        """The ``bwrap ... --`` words that put a command in the sandbox (see the module docstring)."""
        size = str(self.disk_mb << 20)
        if self.drops_privileges:
            # No user namespace: bwrap mounts as root, then the launcher becomes place.uid.
            argv = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                    "--unshare-cgroup-try", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                    "--cap-add", "CAP_SETGID"]
        else:
            argv = ["bwrap", "--unshare-all", "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID)]
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev"]
        # Writable, size-limited tmpfs (mounted by bwrap as root, so open to the kernel's uid).
        for path in ("/dev/shm", "/tmp", INSIDE_HOME):
            argv += ["--perms", "01777", "--size", size, "--tmpfs", path]
        argv += ["--tmpfs", "/opt", "--tmpfs", "/sandbox"]
        for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            argv += ["--ro-bind-try", path, path]
        # bwrap makes missing parents of a mount point private (0700): open them, or another uid is locked out.
        for path in _parents([*self.read_only, place.spec_folder, place.ipc_folder, PACKAGE_MOUNT + "/autograd_lab"]):
            argv += ["--perms", "0755", "--dir", path]
        argv += ["--perms", "0755", "--dir", "/etc"]
        for name in ETC:
            if _world_readable(os.path.join("/etc", name)):
                argv += ["--ro-bind", os.path.join("/etc", name), os.path.join("/etc", name)]
        argv += ["--ro-bind", os.path.join(place.spec_folder, "passwd"), "/etc/passwd",
                 "--ro-bind", os.path.join(place.spec_folder, "group"), "/etc/group"]
        for path in self.read_only:
            argv += ["--ro-bind", path, path]
        for path in self.masked:
            argv += ["--ro-bind", "/dev/null", path]
        package = os.path.join(PACKAGE_MOUNT, "autograd_lab")
        argv += ["--ro-bind", os.path.join(self.package_root, "autograd_lab"), package]  # never the solutions
        argv += ["--ro-bind", place.submission, INSIDE_SUBMISSION,
                 "--ro-bind", place.spec_folder, place.spec_folder,
                 "--bind", place.ipc_folder, place.ipc_folder, "--chdir", INSIDE_HOME, "--"]
        return argv

    def environment(self, place):
        home = INSIDE_HOME if self.kind == "bubblewrap" else self.work(place)
        env = kernel_environment(home, self.python)
        # The package comes from the bound package root, before anything a .pth file adds.
        env["PYTHONPATH"] = PACKAGE_MOUNT if self.kind == "bubblewrap" else self.package_root
        return env

    def write_kernelspec(self, place, wrap=None):
        """A kernelspec in ``place.spec_folder`` that starts ipykernel in this sandbox (``wrap``: in its cgroup)."""
        spec_dir = os.path.join(place.spec_folder, KERNEL_NAME)
        os.makedirs(spec_dir, exist_ok=True)
        argv = self.kernel_argv(place)
        # Interrupt by message: a signal to bwrap would not reach the kernel in its own session.
        spec = {"argv": wrap(argv) if wrap else argv, "display_name": "autograd-lab sandbox",
                "language": "python", "interrupt_mode": "message"}
        _write(os.path.join(spec_dir, "kernel.json"), json.dumps(spec))
        return place.spec_folder

    # --- crossing into the worker process ----------------------------------------------------

    def to_json(self):
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "cgroups"}
        data["read_only"], data["masked"] = list(self.read_only), list(self.masked)
        data["cgroups"] = self.cgroups.to_json()
        return data

    @classmethod
    def from_json(cls, data):
        data = dict(data, read_only=tuple(data["read_only"]), masked=tuple(data["masked"]),
                    cgroups=Cgroups.from_json(data["cgroups"]))
        return cls(**data)


def kernel_environment(home, python=sys.executable):
    """The kernel's whole environment: graded mode on, one thread, everything written under ``home``."""
    return {
        "PATH": os.path.dirname(python) + ":/usr/bin:/bin",
        "HOME": home,
        "USER": "student",
        "LOGNAME": "student",
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
    """The folders the kernel's Python needs (its installation, its venv), and .pth files naming host paths."""
    script = "import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, *site.getsitepackages()]))"
    found = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, timeout=120, check=True)
    listed = json.loads(found.stdout)
    folders = {os.path.realpath(p) for p in listed if os.path.isdir(p)}
    folders.add(os.path.realpath(os.path.dirname(os.path.realpath(python))))
    # Only outermost folders, and none the OS binds already cover.
    keep = sorted(f for f in folders if not any(f != o and f.startswith(o + os.sep) for o in folders))
    keep = tuple(f for f in keep if not f.startswith(("/usr/", "/bin/", "/lib")) and f != "/usr")
    return keep, _host_path_files(listed[2:])


def _host_path_files(site_folders):
    """Editable-install files (``__editable__*``, path ``.pth`` files) that would show the repository's path."""
    masked = []
    for folder in site_folders:
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.startswith("__editable__") and os.path.isfile(path):
                masked.append(path)
            elif name.endswith(".pth") and os.path.isfile(path):
                with open(path, errors="replace") as file:
                    if any(line.startswith("/") for line in file):
                        masked.append(path)
    return tuple(masked)


def _missing_requirement(base):
    """Why ``base`` cannot work on this machine at all, checked without starting anything; else ``''``."""
    if not sys.platform.startswith("linux"):
        return f"a sandbox needs Linux and this is {sys.platform}"
    if base.kind == "bubblewrap" and shutil.which("bwrap") is None:
        return "the `bwrap` program was not found"
    if base.kind == "container" and not base.as_root:
        return "the container sandbox switches each kernel to an unprivileged uid, which needs root"
    return ""


_PROBED = {}


def _probe_once(base):
    """``_probe``, run once per process for a sandbox that worked: an assignment grades a batch per
    notebook, and each probe starts a sandboxed Python that imports torch (seconds on a busy machine).
    A failure is never remembered, so a fixed machine is probed again."""
    key = (base.kind, base.python, base.package_root, base.as_root, base.memory_mb, base.file_mb, base.disk_mb)
    if key in _PROBED and not _missing_requirement(base):
        read_only, masked = _PROBED[key]
        return "", replace(base, read_only=read_only, masked=masked)
    problem, sandbox = _probe(base)
    if not problem:
        _PROBED[key] = (sandbox.read_only, sandbox.masked)
    return problem, sandbox


def _probe(base):
    """``('', sandbox)`` when a kernel can start in one here, else ``(why not, None)``."""
    missing = _missing_requirement(base)
    if missing:
        return missing, None
    try:
        read_only, masked = _python_folders(base.python)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return f"{base.python} could not be started ({error})", None
    sandbox = replace(base, read_only=read_only, masked=masked)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="autograd-lab-sandbox-probe-") as scratch:
        os.chmod(scratch, 0o711)
        submission = os.path.join(scratch, "probe.ipynb")
        _write(submission, "{}")
        place = Place(os.path.join(scratch, "kernel"), submission, slot=0)
        sandbox.prepare(place)
        argv = sandbox.kernel_argv(place)
        launcher = argv[:argv.index("--", argv.index("--file-mb")) + 1]
        # The kernel's imports work, the references and root's files are out of its sight.
        check = ("import ipykernel, torch, autograd_lab, importlib.util, os; "
                 "assert importlib.util.find_spec('autograd_lab_solutions') is None, 'the solutions are visible'; "
                 "assert not os.access('/etc/shadow', os.R_OK), '/etc/shadow is readable'")
        try:
            result = subprocess.run([*launcher, base.python, "-c", check], capture_output=True, text=True,
                                    timeout=300, env=sandbox.environment(place), stdin=subprocess.DEVNULL,
                                    cwd=scratch)
        except (OSError, subprocess.SubprocessError) as error:
            return f"the sandbox could not start ({error})", None
    if result.returncode != 0:
        lines = (result.stderr or "failed").strip().splitlines()
        who = (" as an unprivileged uid: its Python, venv and the student build must be readable by other users"
               if base.kind == "container" else "")
        return f"a sandboxed Python could not start{who} ({lines[-1] if lines else 'failed'})", None
    return "", sandbox


def _parents(paths):
    """The folders above ``paths`` (outermost first), except those the sandbox mounts itself."""
    found = []
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        for end in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:end])
            if folder not in found and folder not in ("/tmp", "/usr", "/opt", "/home", "/dev", "/proc"):
                found.append(folder)
    return found


def _world_readable(path):
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & 0o004)


def _chown_tree(path, uid):
    for root, folders, files in os.walk(path):
        for name in [*folders, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)


def _write(path, text):
    with open(path, "w") as file:
        file.write(text)

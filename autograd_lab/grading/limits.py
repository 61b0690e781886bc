"""Limits the Linux kernel enforces on a whole sandbox: one cgroup per kernel (memory, tasks, CPU time).

``Cgroups.for_this_machine()`` finds, once per grader, where this process may
make cgroups with the ``memory`` and ``pids`` controllers:

* **cgroup v2** (every current distribution): a directory below ours whose parent
  hands those controllers down (we are root, or the cgroup was delegated to us:
  ``AUTOGRAD_LAB_CGROUP=/sys/fs/cgroup/...``), else one ``systemd-run --scope``
  per group (``--user`` when not root), which is how systemd delegates;
* **cgroup v1** (older hosts, and this project's CI VM): the ``memory`` and
  ``pids`` hierarchies, used directly as root; a v2 hierarchy mounted beside
  them (hybrid) still gives ``cgroup.kill`` and CPU time.

A ``Group`` then limits everything started through ``group.wrap(argv)``, all
its processes and threads together:

* ``memory.max`` (v1 ``memory.limit_in_bytes``) counts anonymous memory, page
  cache and tmpfs pages (a sandbox's ``/tmp``), with no swap; when it is full the
  kernel's OOM killer kills a process *in that group*, and ``memory.events``
  (v1 ``memory.oom_control``) counts the kill;
* ``pids.max`` counts tasks, threads included; ``pids.events`` counts refusals;
* CPU time used (``cpu.stat``, v1 ``cpuacct.usage``), which does not depend on
  how busy the machine is, so timeouts can be judged on it.

Verdicts are read from these counters after the fact (``events()``): what
happened is decided by the kernel, never by which poller looked first.  Where
none of this is possible ``Cgroups.problem`` says why, and the grader falls back
to ``watchdog.py`` and per-process limits, and says so in every report.
"""

import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field

CONTROLLERS = ("memory", "pids")
NO_CGROUPS = ("the kernel cannot limit memory (tmpfs included), processes and threads for each sandbox as a "
              "whole here")


@dataclass(frozen=True)
class Events:
    oom_kills: int = 0     # processes the kernel killed because the group was out of memory
    task_refusals: int = 0  # forks or thread starts refused at the group's task limit

    def since(self, before):
        return Events(self.oom_kills - before.oom_kills, self.task_refusals - before.task_refusals)


@dataclass(frozen=True)
class Cgroups:
    """Where this grader makes its groups; ``problem`` says why none can be made ('' when they can)."""

    kind: str = ""                      # "cgroup v2", "cgroup v1", "cgroup v1 (+v2 for kill and CPU time)", "systemd-run"
    dirs: tuple = ()                    # ((role, base directory), ...); role: memory, pids, unified
    problem: str = ""
    systemd_user: bool = False          # systemd-run --user (kind "systemd-run")

    @property
    def enabled(self):
        return not self.problem

    @classmethod
    def for_this_machine(cls):
        """Probe once: make a base group of our own and a test group in it, and start ``true`` inside."""
        try:
            found = _find()
        except OSError as error:
            return cls(problem=f"the cgroup file system could not be read ({error})")
        if found.problem:
            return found
        try:
            probe = found.group("probe", memory_mb=64, tasks=16)
            try:
                result = subprocess.run(probe.wrap(["true"]), timeout=60, capture_output=True)
            finally:
                probe.remove()
        except (OSError, subprocess.SubprocessError) as error:
            found.remove()
            return cls(problem=f"a cgroup could not be made ({error})")
        if result.returncode != 0:
            found.remove()
            return cls(problem=f"a process could not be started in a cgroup "
                               f"({result.stderr.decode(errors='replace').strip()[:200] or result.returncode})")
        return found

    def describe(self):
        if not self.enabled:
            return f"NOT ENFORCED BY THE KERNEL: {NO_CGROUPS} ({self.problem})"
        return f"enforced by the kernel ({self.kind}) for the whole sandbox"

    def group(self, name, memory_mb=None, tasks=None, parent=None, leaf=True):
        """A new group ``name`` (below ``parent``, a ``Group``) with these limits; remove it when done."""
        if self.kind == "systemd-run":
            return SystemdScope(name, memory_mb, tasks, user=self.systemd_user)
        bases = dict(self.dirs) if parent is None else dict(parent.dirs)
        return Group.create(bases, name, memory_mb, tasks, leaf=leaf)

    def remove(self):
        """Remove the grader's base directories (call when the grader ends)."""
        for _, path in self.dirs:
            _kill_and_remove(path, recursive=True)

    def to_json(self):
        return {"kind": self.kind, "dirs": [list(item) for item in self.dirs], "problem": self.problem,
                "systemd_user": self.systemd_user}

    @classmethod
    def from_json(cls, data):
        return cls(data["kind"], tuple(tuple(item) for item in data["dirs"]), data["problem"], data["systemd_user"])


@dataclass
class Group:
    """One cgroup (one directory per hierarchy used) with a memory and a task limit."""

    dirs: tuple = ()            # ((role, path), ...)
    memory_mb: int = 0
    tasks: int = 0
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def create(cls, bases, name, memory_mb=None, tasks=None, leaf=True):
        """Make ``name`` in every hierarchy of ``bases``; ``None`` limits inherit the parent's."""
        made = []
        try:
            for role, base in bases.items():
                parts = set(role.split("+"))
                path = os.path.join(base, name)
                os.mkdir(path, 0o755)
                made.append((role, path))
                if "unified" in parts and not leaf:
                    _enable_children(path)   # v2: only a group without processes of its own hands down limits
                if "memory" in parts and memory_mb is not None:
                    _write_memory_limit(path, memory_mb, v2="unified" in parts)
                if "pids" in parts and tasks is not None:
                    _write(os.path.join(path, "pids.max"), str(tasks))
        except OSError:
            for _, path in reversed(made):
                _kill_and_remove(path, recursive=True)
            raise
        return cls(tuple(made), memory_mb or 0, tasks or 0)

    def wrap(self, argv):
        """``argv`` started inside this group: a shell enters it, then becomes the command."""
        enter = " && ".join(f"echo $$ > {shlex.quote(os.path.join(path, 'cgroup.procs'))}" for _, path in self.dirs)
        return ["/bin/sh", "-c", f"{enter} && exec \"$@\"", "sh", *argv]

    def _path(self, wanted):
        for role, path in self.dirs:
            if wanted in role.split("+"):
                return path
        return None

    def cpu_seconds(self):
        """CPU time (user + system) used by every process that ever ran in the group."""
        unified = self._path("unified")
        if unified:
            return _flat_keyed(os.path.join(unified, "cpu.stat")).get("usage_usec", 0) / 1e6
        cpuacct = self._path("cpuacct")
        if cpuacct:
            return int(_read(os.path.join(cpuacct, "cpuacct.usage")) or 0) / 1e9
        return 0.0

    def events(self):
        memory, pids = self._path("memory"), self._path("pids")
        oom = 0
        if memory:
            name = "memory.events" if os.path.exists(os.path.join(memory, "memory.events")) else "memory.oom_control"
            oom = _flat_keyed(os.path.join(memory, name)).get("oom_kill", 0)
        refused = _flat_keyed(os.path.join(pids, "pids.events")).get("max", 0) if pids else 0
        return Events(oom, refused)

    def pids(self):
        found = set()
        for _, path in self.dirs:
            found |= _procs(path)
        return found

    def kill(self):
        """SIGKILL every process in the group and the groups below it (``cgroup.kill``, or frozen first in v1)."""
        for _, path in self.dirs:
            _kill_and_remove(path, remove=False, recursive=True)

    def freeze(self, frozen):
        """Stop (or restart) every process in the group at once; False where the host cannot."""
        for role, path in self.dirs:
            parts = role.split("+")
            if "unified" in parts and os.path.exists(os.path.join(path, "cgroup.freeze")):
                _try_write(os.path.join(path, "cgroup.freeze"), "1" if frozen else "0")
                return _settled(os.path.join(path, "cgroup.events"), "frozen", "1" if frozen else "0")
            if "freezer" in parts:
                _try_write(os.path.join(path, "freezer.state"), "FROZEN" if frozen else "THAWED")
                return True
        return False

    def remove(self):
        self.kill()
        for _, path in reversed(self.dirs):
            _kill_and_remove(path, recursive=True)


class SystemdScope(Group):
    """A group made by ``systemd-run --scope`` when we may not write the cgroup tree ourselves."""

    def __init__(self, name, memory_mb, tasks, user):
        super().__init__((), memory_mb, tasks)
        self.unit = f"autograd-lab-{name.replace('/', '-')}-{uuid.uuid4().hex[:8]}.scope"
        self.user = user

    def wrap(self, argv):
        return ["systemd-run", *(["--user"] if self.user else []), "--scope", "--quiet", "--collect",
                f"--unit={self.unit}", "-p", f"MemoryMax={self.memory_mb}M", "-p", "MemorySwapMax=0",
                "-p", f"TasksMax={self.tasks}", "--", *argv]

    def attach(self, pid):
        """Read where systemd put ``pid`` (call once the wrapped command runs)."""
        for _ in range(100):
            path = _unified_path_of(pid)
            if path and path.endswith(self.unit):
                self.dirs = (("unified+memory+pids", path),)
                return
            time.sleep(0.02)

    def remove(self):
        self.kill()
        cmd = ["systemctl", *(["--user"] if self.user else []), "stop", self.unit]
        subprocess.run(cmd, capture_output=True, timeout=60)


# --- finding what the machine offers ----------------------------------------------------------

def _mounts():
    """``{"unified": mount point}`` and ``{controller: mount point}`` of the v1 hierarchies."""
    found = {}
    with open("/proc/self/mountinfo") as file:
        for line in file:
            left, _, right = line.partition(" - ")
            fstype, _, options = right.split()[:3]
            point = left.split()[4]
            if fstype == "cgroup2":
                found.setdefault("unified", point)
            elif fstype == "cgroup":
                for option in options.split(","):
                    if option in ("memory", "pids", "cpuacct", "freezer"):
                        found.setdefault(option, point)
    return found


def _own_paths():
    """``{"unified": path}`` and ``{controller: path}``: where this process sits in each hierarchy."""
    paths = {}
    with open("/proc/self/cgroup") as file:
        for line in file:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                paths["unified"] = path
            for controller in controllers.split(","):
                paths[controller] = path
    return paths


def _find():
    mounts, own = _mounts(), _own_paths()
    base_name = f"autograd-lab-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    delegated = os.environ.get("AUTOGRAD_LAB_CGROUP")
    unified = mounts.get("unified")
    v2_controllers = set()
    if unified and "unified" in own:
        here = delegated or _v2_parent_with(unified, own["unified"])
        if here:
            v2_controllers = set(_read(os.path.join(here, "cgroup.subtree_control")).split())
    if unified and {"memory", "pids"} <= v2_controllers:
        base = os.path.join(here, base_name)
        os.mkdir(base, 0o755)
        _enable_children(base)
        return Cgroups("cgroup v2", (("unified+memory+pids", base),))
    if all(c in mounts for c in CONTROLLERS) and os.geteuid() == 0:
        dirs = []
        for role in ("memory", "pids", "cpuacct", "freezer"):
            if role in mounts and role in own:
                path = os.path.join(mounts[role] + own[role].rstrip("/"), base_name)
                os.mkdir(path, 0o755)
                dirs.append((role, path))
        kind = "cgroup v1"
        if unified and "unified" in own and os.access(mounts["unified"] + own["unified"], os.W_OK):
            path = os.path.join(mounts["unified"] + own["unified"].rstrip("/"), base_name)
            os.mkdir(path, 0o755)
            dirs.append(("unified", path))
            kind = "cgroup v1 (memory, pids) and v2 (kill, CPU time)"
        return Cgroups(kind, tuple(dirs))
    if unified and shutil.which("systemd-run") and _systemd_running():
        user = os.geteuid() != 0
        return Cgroups("systemd-run", (), "", systemd_user=user)
    if not mounts:
        return Cgroups(problem="no cgroup file system is mounted (a container without one, or not Linux)")
    if unified:
        return Cgroups(problem="no cgroup v2 directory with the memory and pids controllers is writable by this "
                               "user and systemd-run is not usable; ask the administrator to delegate one "
                               "(set AUTOGRAD_LAB_CGROUP to it) or grade as root")
    return Cgroups(problem="cgroup v1 hierarchies can only be used as root")


def _v2_parent_with(mount, own):
    """The nearest cgroup at or above ours, writable by us, that already hands memory and pids to children."""
    path = own.rstrip("/")
    while True:
        directory = mount + path if path else mount
        control = _read(os.path.join(directory, "cgroup.subtree_control")).split()
        # Our own cgroup holds processes (us at least), so its children could not get controllers.
        if path != own.rstrip("/") or not _procs(directory):
            if {"memory", "pids"} <= set(control) and os.access(directory, os.W_OK):
                return directory
        if not path:
            return None
        path = path.rsplit("/", 1)[0]


def _systemd_running():
    return os.path.isdir("/run/systemd/system")


def _enable_children(path):
    available = set(_read(os.path.join(path, "cgroup.controllers")).split())
    wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in available)
    if wanted:
        try:
            _write(os.path.join(path, "cgroup.subtree_control"), wanted)
        except OSError:
            pass


def _write_memory_limit(path, memory_mb, v2):
    limit = str(memory_mb << 20)
    if v2:
        _write(os.path.join(path, "memory.max"), limit)
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "0")):
            if os.path.exists(os.path.join(path, name)):
                _write(os.path.join(path, name), value)
        return
    _write(os.path.join(path, "memory.limit_in_bytes"), limit)
    if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
        try:
            _write(os.path.join(path, "memory.memsw.limit_in_bytes"), limit)   # no swap either
        except OSError:
            pass


def _unified_path_of(pid):
    mounts = _mounts()
    try:
        with open(f"/proc/{pid}/cgroup") as file:
            for line in file:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "" and "unified" in mounts:
                    return mounts["unified"] + path
    except OSError:
        return None
    return None


# --- files ----------------------------------------------------------------------------------

def _read(path):
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


def _write(path, text):
    with open(path, "w") as file:
        file.write(text)


def _flat_keyed(path):
    values = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def _procs(path):
    return {int(p) for p in _read(os.path.join(path, "cgroup.procs")).split() if p.isdigit()}


def _kill_and_remove(path, remove=True, recursive=False):
    """Kill every process in ``path`` (and below); then remove the directories, deepest first."""
    if not os.path.isdir(path):
        return
    if recursive:
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                _kill_and_remove(entry.path, remove, recursive)
    kill_file = os.path.join(path, "cgroup.kill")
    freezer = os.path.join(path, "freezer.state")
    for _ in range(200):
        pids = _procs(path)
        if not pids:
            break
        if os.path.exists(kill_file):
            _try_write(kill_file, "1")
        else:
            _try_write(freezer, "FROZEN") if os.path.exists(freezer) else None
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            _try_write(freezer, "THAWED") if os.path.exists(freezer) else None
        time.sleep(0.01)
    if remove:
        for _ in range(500):
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:   # a process still exiting: its task leaves the group in a moment
                time.sleep(0.01)


def _settled(path, key, value, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if str(_flat_keyed(path).get(key)) == value:
            return True
        time.sleep(0.005)
    return False


def _try_write(path, text):
    try:
        _write(path, text)
    except OSError:
        pass

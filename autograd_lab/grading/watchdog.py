"""The fallback where the host gives no cgroup: a process tree's memory, size and CPU time, read from ``/proc``.

Where ``limits.py`` can make cgroups, the kernel enforces the limits and this
module only serves to find and kill a process tree.  Elsewhere (a container
without cgroups, a host that delegates none) ``Watchdog(pid, memory_mb,
max_processes)`` polls the tree under ``pid`` (the sandbox's ``bwrap``) a few
times a second and SIGKILLs all of it when the sum of resident memory or the
number of processes goes over the limit.  That is a race against the clock,
which is why every report then says the limits are not enforced by the kernel:
tmpfs pages are not counted, threads are not counted, and a fast fork bomb can
outrun one scan.  It limits real memory, not address space, so CUDA builds of
torch still import.
"""

import os
import signal
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE")
_POLL = 0.1


def _children():
    """parent pid -> child pids, for every process on the machine."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] != b"Z":   # a zombie is dead already: nothing to kill or count
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def tree(pid):
    """``pid`` and every process below it."""
    children, found, stack = _children(), [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def resident_bytes(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as file:
                total += int(file.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def cpu_seconds(pids):
    """User and system CPU time of ``pids``, with that of the children each has reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        total += sum(int(value) for value in fields[11:15])   # utime, stime, cutime, cstime
    return total / ticks


def kill_tree(pid, spare_root=False):
    """SIGKILL ``pid`` and everything below it, again until nothing is left (a forking tree grows back)."""
    for _ in range(50):
        members = [m for m in tree(pid) if not (spare_root and m == pid)]
        alive = False
        for member in members:
            try:
                os.kill(member, signal.SIGKILL)
                alive = True
            except (ProcessLookupError, PermissionError):
                pass
        if not alive:
            return


class Watchdog:
    """Kill the tree under ``pid`` when it holds too much memory or too many processes."""

    def __init__(self, pid, memory_mb, max_processes):
        self.pid, self.limit, self.max_processes = pid, memory_mb << 20, max_processes
        self.reason = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        return False

    def _watch(self):
        while not self._stop.wait(_POLL):
            pids = tree(self.pid)
            if len(pids) > self.max_processes:
                self.reason = f"it started more than {self.max_processes} processes"
            elif resident_bytes(pids) > self.limit:
                self.reason = f"it used more than {self.limit >> 20} MiB of memory (all its processes together)"
            else:
                continue
            kill_tree(self.pid)
            return

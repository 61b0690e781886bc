"""A limit on a whole process tree: resident memory and process count, read from ``/proc``.

``Watchdog(pid, memory_mb, max_processes)`` polls the tree under ``pid`` (the
sandbox's ``bwrap``) a few times a second and SIGKILLs all of it when the sum of
resident memory or the number of processes goes over the limit.  A submission
that forks four children of 0.6 GB each is over a 2 GB limit together.
It limits real memory, not address space, so CUDA builds of torch still import.
Where systemd can give us a cgroup this would be ``MemoryMax``/``TasksMax``;
in containers it usually cannot, and this works everywhere ``/proc`` does.
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


def kill_tree(pid):
    for member in tree(pid):
        try:
            os.kill(member, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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

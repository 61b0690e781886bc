"""Start the student's kernel inside the sandbox, with its per-process limits and without privileges.

The kernelspec runs ``python -I -S .../autograd_lab/grading/launcher.py [options] --
<kernel argv>`` inside the sandbox (``sandbox.py``).  It is run by file path with
``-I -S`` and imports only the standard library, so nothing in the work folder
or on ``PYTHONPATH`` can stand in for it.  This process:

* copies the grader's read-only copy of the notebook into the work folder
  (``--copy``), the kernel's current folder;
* switches to an unprivileged uid (``--uid``) when the grader is root, so the
  kernel never has root's access to files;
* sets ``RLIMIT_FSIZE`` (the largest file), ``RLIMIT_CORE`` 0, and, only where
  no cgroup limits the sandbox's tasks, ``RLIMIT_NPROC`` (``--nproc``);
* then ``exec``s the kernel, which inherits the limits and cannot raise them.

There is deliberately no ``RLIMIT_AS``: CUDA builds of torch map far more
address space than they use and cannot even be imported under it.  Memory is
limited for the whole sandbox by its cgroup (``limits.py``).
"""

import argparse
import os
import resource
import shutil
import sys

MIB = 1 << 20


def _parse(argv):
    parser = argparse.ArgumentParser(prog="autograd_lab/grading/launcher.py")
    parser.add_argument("--file-mb", type=int, required=True)
    parser.add_argument("--nproc", type=int, default=0, help="RLIMIT_NPROC above what the uid runs now; 0: none")
    parser.add_argument("--uid", type=int, default=None, help="become this uid (and gid) first")
    parser.add_argument("--work", default=None, help="the kernel's working folder (made if missing)")
    parser.add_argument("--copy", default=None, help="a file to copy into the work folder")
    parser.add_argument("kernel", nargs=argparse.REMAINDER, help="-- then the kernel's argv")
    args = parser.parse_args(argv)
    if args.kernel[:1] == ["--"]:
        args.kernel = args.kernel[1:]
    if not args.kernel:
        parser.error("give the kernel command after --")
    return args


def _limit(which, value):
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def processes_of_this_user():
    """How many processes the real user of this process runs (what RLIMIT_NPROC counts)."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            continue
    return count


def drop_privileges(uid):
    """Become ``uid`` (and gid ``uid``, no supplementary groups): every capability goes with root."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SystemExit("autograd-lab launcher: could not drop root privileges")


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.uid is not None:
        drop_privileges(args.uid)
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        os.chdir(args.work)
        if args.copy:
            shutil.copyfile(args.copy, os.path.join(args.work, "submission.ipynb"))
    _limit(resource.RLIMIT_FSIZE, args.file_mb * MIB)
    _limit(resource.RLIMIT_CORE, 0)
    if args.nproc:
        # /proc may show only this PID namespace while the kernel counts the uid everywhere:
        # leave room for the processes we cannot see.
        _limit(resource.RLIMIT_NPROC, processes_of_this_user() + args.nproc)
    # ipykernel exits when its parent looks gone (parent pid 1), which is what every
    # process in a fresh PID namespace sees; bwrap's --die-with-parent does that job.
    os.environ.pop("JPY_PARENT_PID", None)
    os.execv(args.kernel[0], args.kernel)


if __name__ == "__main__":
    main()

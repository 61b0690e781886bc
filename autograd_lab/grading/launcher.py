"""Start the student's kernel inside the grader's per-process limits.

The kernelspec runs ``python -m autograd_lab.grading.launcher [limits] -- <kernel
argv>`` inside the bubblewrap sandbox (``sandbox.py``).  This process applies
the limits to itself and then ``exec``s the kernel, which inherits them and
cannot raise them again:

* ``RLIMIT_FSIZE``: the largest file the kernel may write;
* ``RLIMIT_NPROC``: processes of the kernel's user, against fork bombs.  It
  counts every process of the user the sandbox maps to (the grader's own user
  outside), so it is set to what that user runs now plus ``--nproc``;
* ``RLIMIT_CORE`` 0: no core dumps.

There is deliberately no ``RLIMIT_AS``: CUDA builds of torch map far more
address space than they use and cannot even be imported under it.  Memory is
limited on resident memory of the whole sandbox, by the grader's watchdog.
"""

import argparse
import os
import resource
import sys

MIB = 1 << 20


def _parse(argv):
    parser = argparse.ArgumentParser(prog="autograd_lab.grading.launcher")
    parser.add_argument("--file-mb", type=int, required=True)
    parser.add_argument("--nproc", type=int, default=256)
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


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    _limit(resource.RLIMIT_FSIZE, args.file_mb * MIB)
    _limit(resource.RLIMIT_CORE, 0)
    # Inside the sandbox /proc shows only this PID namespace; the kernel counts the user's
    # processes everywhere, so leave room for those we cannot see (the grader's watchdog
    # counts the sandbox's own processes exactly).
    _limit(resource.RLIMIT_NPROC, processes_of_this_user() + args.nproc)
    # ipykernel exits when its parent looks gone (parent pid 1), which is what every
    # process in a fresh PID namespace sees; bwrap's --die-with-parent does that job.
    os.environ.pop("JPY_PARENT_PID", None)
    os.execv(args.kernel[0], args.kernel)


if __name__ == "__main__":
    main()

"""Start the student's kernel inside the grader's limits.

The grader's kernelspec runs ``python -m autograd_lab.grading.launcher [limits] --
<kernel argv>``.  This process applies the limits to itself and then ``exec``s the
kernel, so the kernel inherits them and cannot raise them again:

* ``RLIMIT_AS``: address space, so a memory hog gets ``MemoryError`` instead of
  taking the machine down;
* ``RLIMIT_FSIZE``: the largest file the kernel may write;
* ``RLIMIT_NPROC`` (only with ``--uid``): processes of the sandbox user, against
  fork bombs;
* ``--uid``/``--gid``: when the grader runs as root, the kernel drops to a
  numeric user of its own, so it cannot write the output folder, the submissions
  or another student's work folder.  The connection file is handed to that user
  first, because the kernel must read it.
"""

import argparse
import os
import resource
import sys

MIB = 1 << 20


def _parse(argv):
    parser = argparse.ArgumentParser(prog="autograd_lab.grading.launcher")
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--file-mb", type=int, required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--nproc", type=int, default=256)
    parser.add_argument("kernel", nargs=argparse.REMAINDER, help="-- then the kernel's argv")
    args = parser.parse_args(argv)
    if args.kernel[:1] == ["--"]:
        args.kernel = args.kernel[1:]
    if not args.kernel:
        parser.error("give the kernel command after --")
    return args


def _limit(which, value):
    resource.setrlimit(which, (value, value))


def _connection_file(kernel_argv):
    """The value of ``-f`` in the kernel's argv (ipykernel's connection file)."""
    for flag, value in zip(kernel_argv, kernel_argv[1:]):
        if flag == "-f":
            return value
    return None


def drop_privileges(uid, gid, nproc, kernel_argv):
    connection_file = _connection_file(kernel_argv)
    if connection_file:
        os.chown(connection_file, uid, gid)
    os.setgroups([])
    os.setgid(gid)
    # RLIMIT_NPROC counts the real user's processes: set it just before becoming that user.
    _limit(resource.RLIMIT_NPROC, nproc)
    os.setuid(uid)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    _limit(resource.RLIMIT_AS, args.memory_mb * MIB)
    _limit(resource.RLIMIT_FSIZE, args.file_mb * MIB)
    _limit(resource.RLIMIT_CORE, 0)
    if args.uid is not None:
        drop_privileges(args.uid, args.gid if args.gid is not None else args.uid, args.nproc, args.kernel)
    os.execv(args.kernel[0], args.kernel)


if __name__ == "__main__":
    main()

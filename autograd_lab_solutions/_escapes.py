"""Bank entries for exercises that ban a library: the work done in a child process started through ctypes.

Adversarial round 8 (docs/audits/adv-05-08-r7.md, 05n_ctypes and 08s_ctypes): libc's ``system()``, reached
as ``ctypes.CDLL(None).system``, ran GradScaler (05.next_scales) or DistributedSampler (08.shard) in a child
Python, and the answer read the result back from a file: full marks, since no recorder sees another
process.  Here the child runs the exercise's reference (pure Python, started with ``-S -I`` so the bank
stays cheap: the checker cannot tell what a child ran, which is the point), once through a fresh lookup
and once through a function pointer fetched when this module was imported, before any check (its call
has no Python frame: only the child's traces, ``checking.tape._Processes``, show it).
"""

import ctypes
import inspect
import json
import os
import shutil
import sys
import tempfile

try:
    _SYSTEM = ctypes.CDLL(None).system          # fetched now, before any check runs
except (OSError, TypeError, AttributeError):    # no C library to look it up in (Windows)
    _SYSTEM = None


def in_child(function, *, prefetched=False):
    """An answer that computes ``function(*args)`` in a child Python started by libc's ``system()``."""
    def answer(*args):
        folder = tempfile.mkdtemp()
        try:
            script, out = os.path.join(folder, "child.py"), os.path.join(folder, "out.json")
            plain = [arg.tolist() if hasattr(arg, "tolist") else arg for arg in args]
            with open(script, "w") as file:
                file.write(f"import json\n{inspect.getsource(function)}\n"
                           f"print(json.dumps({function.__name__}(*{plain!r})))\n")
            command = f"{sys.executable} -S -I {script} > {out}".encode()
            (_SYSTEM if prefetched else ctypes.CDLL(None).system)(command)
            with open(out) as file:
                return json.load(file)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return answer

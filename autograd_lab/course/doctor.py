"""``autograd-lab doctor``: is this machine ready for the course?

Each check returns a ``Finding``.  A finding that fails comes with the exact
fix, and ``required`` findings decide the exit status: a missing GPU is
information, a missing ``dot`` binary is a problem.
"""

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python():
    ok = sys.version_info >= (3, 10)
    return Finding("python", ok, platform.python_version(),
                   fix="Install Python 3.10 or newer, then run `make lab` again.")


# What a student's notebooks need, beside torch: the student build's requirements.txt installs these
# (``grading.release._STUDENT_REQUIREMENTS``; tests/test_doctor.py keeps the two in step).
STUDENT_PACKAGES = ("jupyterlab", "ipykernel", "graphviz")
# Only the developers' notebook tests use these (`make test`); the student build does not install them.
DEVELOPER_PACKAGES = ("nbval",)


def in_repository():
    """True in a checkout of the repository (it has ``make setup``); False in a student build, which has neither
    a Makefile nor a pyproject.toml, only ``requirements.txt``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.isfile(os.path.join(root, "pyproject.toml"))


def install_hint():
    """How to install the course's packages here: `make setup` in the repository, requirements.txt in a student build."""
    if in_repository():
        return "run `make setup` (or `pip install -e .`)"
    return "run `pip install -r requirements.txt` in this folder's virtual environment"


def check_package(distribution, why, required=True):
    version = _version(distribution)
    return Finding(distribution, version is not None, version or "not installed",
                   fix=f"{why} is missing: {install_hint()}.", required=required)


def check_developer_package(distribution):
    """A package only the notebook tests need: information, never a problem for a student."""
    version = _version(distribution)
    return Finding(distribution, version is not None, version or "not installed",
                   fix=(f"Nothing to do for the course: {distribution} only runs the notebook tests "
                        "(`make test` in the repository, whose `make setup` installs it)."),
                   required=False)


def check_dot():
    path = shutil.which("dot")
    if path is None:
        return Finding("graphviz dot", False, "not found on PATH", fix=dot_install_hint())
    result = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30)
    version = (result.stderr or result.stdout).strip()  # dot prints its version on stderr
    return Finding("graphviz dot", result.returncode == 0, version or path,
                   fix="`dot -V` failed: reinstall graphviz. " + dot_install_hint())


def dot_install_hint():
    """One line that says how to get the graphviz ``dot`` binary on this system."""
    if sys.platform == "darwin":
        return "Install graphviz: `brew install graphviz` (or `conda install -c conda-forge graphviz`)."
    if sys.platform.startswith("win"):
        return "Install graphviz: `conda install -c conda-forge graphviz` or `winget install graphviz`, then reopen the terminal."
    return "Install graphviz: `sudo apt-get install graphviz` (or `conda install -c conda-forge graphviz`)."


def check_cuda():
    import torch

    if not torch.cuda.is_available():
        return Finding("cuda", False, "not available: GPU sections will be skipped, everything else runs on CPU",
                       fix="Nothing to do for the course. For GPU figures, run on a machine with an NVIDIA GPU and a CUDA build of torch.",
                       required=False)
    return Finding("cuda", True, f"{torch.cuda.device_count()} device(s), {torch.cuda.get_device_name(0)}",
                   required=False)


def check_cpu_amp():
    """The AMP lab needs CPU autocast and ``GradScaler("cpu")`` (torch >= 2.3)."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaler = torch.amp.GradScaler("cpu")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = torch.ones(2, 2) @ torch.ones(2, 2)
        ok = out.dtype == torch.bfloat16 and scaler.is_enabled()
        detail = "CPU autocast gives bfloat16; GradScaler('cpu') enabled" if ok else "autocast or GradScaler('cpu') is disabled"
    except Exception as error:  # any failure here is exactly what doctor must report
        ok, detail = False, f"{type(error).__name__}: {error}"
    return Finding("cpu amp", ok, detail,
                   fix="Upgrade torch: the course pins torch==2.13.0 in requirements/course.txt (`make setup`).")


# The kernel's own packages: their threads (IOPub, heartbeat, control, shell, history) run beside every answer.
KERNEL_PACKAGES = ("ipykernel", "IPython", "zmq", "tornado", "jupyter_client", "traitlets")


def check_kernel_files():
    """The kernel's packages must be where the exercise checks count code as a library's.

    A check that observes the method takes a thread running code outside this Python's own site
    folders for one the notebook started (``checking.tape``; the user's site folder is left out on
    purpose, since a submission can write there).  A kernel installed with ``pip install --user``,
    ``--target`` or ``PYTHONPATH`` therefore fails every such check, correct answers too (seen on a
    GPU machine with the kernel carried in by ``--target``).
    """
    from autograd_lab.checking import tape

    outside = []
    for name in KERNEL_PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None)
        if origin and os.path.isabs(origin) and not tape.is_library_file(origin):
            outside.append(f"{name} in {os.path.dirname(os.path.dirname(origin))}")
    if not outside:
        return Finding("kernel files", True, "the kernel's packages are in this Python's own site folders")
    return Finding("kernel files", False, "outside this Python's own site folders: " + "; ".join(outside),
                   fix=("Install the course in a virtual environment (`make setup`, or `pip install -e .` inside "
                        "a venv), not with `pip install --user`, `--target` or PYTHONPATH: the exercise checks "
                        "would take the kernel's own threads for threads your notebook started and fail every answer."))


def check_torch_range():
    """The course is tested on a range of torch releases (``versions.SUPPORTED``); outside it, say so."""
    from autograd_lab import versions

    version = _version("torch")
    ok = versions.in_supported_range(version)
    low, high = versions.SUPPORTED
    detail = (f"{version}: inside the tested range {low},{high}" if ok
              else f"{version}: outside the tested range {low},{high}; the labs may fail or teach what your torch does not do")
    return Finding("torch range", ok, detail, fix=(
        f"In the course's venv run `make setup` (it installs the reference torch=={versions.PINNED}), "
        f"or in your own environment `pip install \"torch{low},{high}\"`."))


def run_checks(quick=False):
    """Every check; ``quick`` leaves out the three that import torch (seconds to tens of seconds)."""
    findings = [check_python(), check_package("torch", "PyTorch")]
    if findings[1].ok:
        findings.append(check_torch_range())
    findings += [check_package(name, name) for name in STUDENT_PACKAGES]
    findings += [check_developer_package(name) for name in DEVELOPER_PACKAGES]
    findings.append(check_dot())
    if findings[1].ok and not quick:
        findings += [check_cuda(), check_cpu_amp(), check_kernel_files()]
    return findings


def format_findings(findings):
    lines = []
    for finding in findings:
        mark = "ok " if finding.ok else ("-- " if not finding.required else "XX ")
        lines.append(f"{mark} {finding.name:<14} {finding.detail}")
        if not finding.ok and finding.fix:
            lines.append(f"    fix: {finding.fix}")
    problems = [f for f in findings if f.required and not f.ok]
    lines.append("Ready for the course." if not problems
                 else f"{len(problems)} problem(s) to fix (marked XX; their fix: lines say how).")
    return "\n".join(lines)


def main(args=None):
    quick = bool(getattr(args, "quick", False))
    findings = run_checks(quick=quick)
    report = format_findings(findings)
    if quick and all(f.ok for f in findings if f.required):
        # `make lab` runs this before every start: one line when all is well, the details when not.
        found = {f.name: f.detail for f in findings}
        report = (f"doctor --quick: ready (Python {found['python']}, torch {found['torch']}, "
                  f"JupyterLab {found['jupyterlab']}, {found['graphviz dot']}); `make doctor` checks everything")
    print(report)
    return 0 if all(f.ok for f in findings if f.required) else 1

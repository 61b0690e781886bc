"""Run graphviz's ``dot`` with a time limit; say clearly what to do when it is missing or slow."""

import shutil
import subprocess

from .describe import plural

INSTALL_HINT = ("graphviz's `dot` program was not found on PATH, so this graph is shown as text. "
                "Install it (Debian/Ubuntu: sudo apt install graphviz; macOS: brew install graphviz; "
                "conda: conda install -c conda-forge graphviz) to see the picture.")


class LayoutError(RuntimeError):
    """``dot`` is missing, failed, or ran past the time limit."""


def dot_available():
    return shutil.which("dot") is not None


def render(source, fmt="svg", timeout=30.0, node_count=None):
    """Bytes of ``source`` rendered by ``dot -T<fmt>``."""
    if not dot_available():
        raise LayoutError(INSTALL_HINT)
    try:
        done = subprocess.run(["dot", f"-T{fmt}"], input=source.encode(), capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        size = " " + plural(node_count, "node") if node_count is not None else " this graph"
        raise LayoutError(
            f"graphviz gave up: laying out{size} took more than {timeout:g} s. Draw fewer nodes "
            "(max_nodes=300) or pass a larger layout_timeout."
        ) from None
    if done.returncode != 0:
        raise LayoutError("graphviz's dot failed: " + done.stderr.decode(errors="replace").strip()[:500])
    return done.stdout

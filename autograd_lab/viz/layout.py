"""Lay out and render DOT with graphviz: in this process through ``libgvc``, else a ``dot`` process.

A ``dot`` process costs 13 to 17 ms of CPU before it lays out anything (start-up,
plugin and font loading), and graphviz's pango plugin measures every label line
with the installed fonts.  So a graph is laid out here, in the process, by
graphviz's own library (``libgvc``, installed with every graphviz) with only the
``core`` (SVG, JSON) and layout plugins loaded: label sizes then come from
graphviz's built-in font metrics (monospace labels: see ``dot.py``), which costs 40 to 50% less layout time and
gives the same picture on every machine whatever its fonts (measured in
``benchmarks/viz_scaling.py`` and docs/benchmarks.md, with pygraphviz and the
``dot`` process as the other candidates).

The binding is ``ctypes``: pygraphviz has no wheels (a C compiler and graphviz's
headers at set-up), opens a new context per picture (measured slower than a
``dot`` process on GPT-2), and cannot choose plugins.  The six functions used
here (``gvContextPlugins``, ``agmemread``, ``gvLayout``, ``gvRenderData``,
``gvFreeRenderData``/``gvFreeLayout``, ``agclose``) are graphviz's stable API.

A layout in this process cannot be stopped, so only graphs whose layout is
reliably quick are laid out here (no clusters, at most ``IN_PROCESS_MAX_NODES``
nodes, no node with more than ``IN_PROCESS_MAX_DEGREE`` edges: the shapes that
made ``dot`` run for minutes); the others, PNG and PDF, and any failure of the
library, go to a ``dot`` process with a time limit.  ``AUTOGRAD_LAB_LAYOUT=process``
forces the process.
"""

import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import sys
import threading

from .describe import plural

INSTALL_HINT = ("graphviz's `dot` program was not found on PATH, so this graph is shown as text. "
                "Install it (Debian/Ubuntu: sudo apt install graphviz; macOS: brew install graphviz; "
                "conda: conda install -c conda-forge graphviz) to see the picture.")
IN_PROCESS_MAX_NODES = 1500
IN_PROCESS_MAX_DEGREE = 32
IN_PROCESS_FORMATS = ("svg", "json0")
_PLUGINS = ("core", "dot_layout", "neato_layout")   # neato's plugin brings nop2: a layout kept as given


class LayoutError(RuntimeError):
    """``dot`` is missing, failed, or ran past the time limit."""


def dot_available():
    return shutil.which("dot") is not None


def render(source, fmt="svg", timeout=30.0, node_count=None, quick=False, engine="dot"):
    """Bytes of ``source`` rendered as ``fmt``.

    ``quick``: the caller vouches that the layout is quick (see the module docstring),
    so it may run in this process.  ``engine="nop2"`` keeps the positions the source
    gives (``pos`` attributes): a picture drawn on an existing layout.
    """
    if quick and fmt in IN_PROCESS_FORMATS and os.environ.get("AUTOGRAD_LAB_LAYOUT") != "process":
        library = _library()
        if library is not None:
            data = library.render(source, fmt, engine)
            if data is not None:
                return data
    return _render_process(source, fmt, timeout, node_count, engine)


def backend():
    """Where a quick graph is laid out: ``"libgvc"`` (this process) or ``"dot process"``."""
    if os.environ.get("AUTOGRAD_LAB_LAYOUT") == "process" or _library() is None:
        return "dot process"
    return "libgvc"


def _render_process(source, fmt, timeout, node_count, engine):
    if not dot_available():
        raise LayoutError(INSTALL_HINT)
    command = ["dot", f"-T{fmt}"] if engine == "dot" else ["neato", "-n2", f"-T{fmt}"]
    try:
        done = subprocess.run(command, input=source.encode(), capture_output=True,
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


class _Library:
    """One graphviz context with the core and layout plugins, used under a lock (graphviz is not thread-safe)."""

    def __init__(self, gvc, cgraph, plugin_files):
        self._lock = threading.Lock()
        self._gvc, self._cgraph = gvc, cgraph
        self._plugins = [ctypes.CDLL(path) for path in plugin_files]   # kept loaded for the context
        c_void_p, c_char_p = ctypes.c_void_p, ctypes.c_char_p
        gvc.gvContextPlugins.restype = c_void_p
        gvc.gvContextPlugins.argtypes = [c_void_p, ctypes.c_int]
        gvc.gvLayout.argtypes = [c_void_p, c_void_p, c_char_p]
        gvc.gvRenderData.argtypes = [c_void_p, c_void_p, c_char_p, ctypes.POINTER(c_void_p),
                                     ctypes.POINTER(ctypes.c_size_t)]
        gvc.gvFreeRenderData.argtypes = [c_void_p]
        gvc.gvFreeLayout.argtypes = [c_void_p, c_void_p]
        cgraph.agmemread.restype = c_void_p
        cgraph.agmemread.argtypes = [c_char_p]
        cgraph.agclose.argtypes = [c_void_p]
        symbols = (_Symbol * (len(_PLUGINS) + 1))()
        for i, (name, plugin) in enumerate(zip(_PLUGINS, self._plugins)):
            entry = f"gvplugin_{name}_LTX_library"
            symbols[i] = _Symbol(entry.encode(), ctypes.cast(getattr(plugin, entry), c_void_p))
        self._symbols = symbols
        self._context = gvc.gvContextPlugins(ctypes.cast(symbols, c_void_p), 0)   # 0: load no other plugin
        if not self._context:
            raise OSError("gvContextPlugins returned no context")

    def render(self, source, fmt, engine):
        """The rendered bytes, or None when graphviz refused (the caller then runs ``dot``)."""
        with self._lock:
            graph = self._cgraph.agmemread(source.encode())
            if not graph:
                return None
            try:
                if self._gvc.gvLayout(self._context, graph, engine.encode()) != 0:
                    return None
                try:
                    data, length = ctypes.c_void_p(), ctypes.c_size_t(0)   # graphviz < 3 writes an unsigned int here
                    if self._gvc.gvRenderData(self._context, graph, fmt.encode(), ctypes.byref(data),
                                              ctypes.byref(length)) != 0 or not data:
                        return None
                    try:
                        return ctypes.string_at(data, length.value)
                    finally:
                        self._gvc.gvFreeRenderData(data)
                finally:
                    self._gvc.gvFreeLayout(self._context, graph)
            finally:
                self._cgraph.agclose(graph)


class _Symbol(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("address", ctypes.c_void_p)]


_LOADED = []


def _library():
    """The in-process graphviz, or None when libgvc or its plugins cannot be found (found once)."""
    if not _LOADED:
        try:
            _LOADED.append(_load())
        except (OSError, AttributeError):
            _LOADED.append(None)
    return _LOADED[0]


def _load():
    gvc = _open("gvc")
    cgraph = _open("cgraph")
    folder = os.path.join(os.path.dirname(_path_of(gvc, "gvContext")), "graphviz")
    files = []
    for name in _PLUGINS:
        found = sorted(glob.glob(os.path.join(folder, f"libgvplugin_{name}.*")), key=len)
        if not found:
            raise OSError(f"graphviz plugin {name} not found in {folder}")
        files.append(found[0])
    return _Library(gvc, cgraph, files)


def _open(name):
    """The library, from the system's search path or beside the ``dot`` on PATH (conda, Homebrew)."""
    path = ctypes.util.find_library(name)
    if path is None and dot_available():
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("dot"))))
        found = sorted(glob.glob(os.path.join(prefix, "lib", f"lib{name}.*[0-9]*")), key=len)
        path = found[0] if found else None
    if path is None:
        raise OSError(f"lib{name} not found")
    return ctypes.CDLL(path)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _path_of(library, symbol):
    """The file a loaded library came from (``dladdr``), where graphviz keeps its ``graphviz/`` plugins."""
    libc = ctypes.CDLL(None if sys.platform != "win32" else "msvcrt")
    info = _DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if not libc.dladdr(ctypes.cast(getattr(library, symbol), ctypes.c_void_p), ctypes.byref(info)):
        raise OSError("dladdr could not locate libgvc")
    return os.path.realpath(info.dli_fname.decode())


def positions(source, timeout=30.0, node_count=None, quick=False):
    """Where graphviz puts everything in ``source``: the layout that ``nop2`` can redraw.

    Returns ``{"bb", "lp", "nodes": {name: (pos, width, height)}, "edges": {(tail, head):
    [(pos, lp), ...]}, "clusters": {name: bb}}``, graphviz's own strings.
    """
    import json

    data = json.loads(render(source, "json0", timeout, node_count, quick=quick))
    objects = data.get("objects", [])
    found = {"bb": data.get("bb"), "lp": data.get("lp"), "nodes": {}, "edges": {}, "clusters": {}}
    for obj in objects:
        if "nodes" in obj or "subgraphs" in obj or obj.get("name", "").startswith("cluster"):
            found["clusters"][obj["name"]] = obj.get("bb")
        elif "pos" in obj:
            found["nodes"][obj["name"]] = (obj["pos"], obj["width"], obj["height"])
    for edge in data.get("edges", []):
        key = (objects[edge["tail"]]["name"], objects[edge["head"]]["name"])
        found["edges"].setdefault(key, []).append((edge.get("pos"), edge.get("lp")))
    return found

"""Pictures of the autograd graph: ``draw``, ``trace_backward``, ``diff`` and ``record_modules``.

``graph.py`` is the facade students call; the pipeline behind it, one idea per module:
``walk`` (grad_fn graph -> plain ``model``), ``names``, ``owners`` and ``inputs`` (what to
call each tensor), ``recorder`` and ``modules`` (group ops by ``nn.Module``), ``describe``
(short labels), ``truncate`` (what ``max_nodes`` keeps), ``dot``, ``text`` and
``tensor_view`` (renderings), ``layout`` (graphviz, in this process or a ``dot`` process),
``trace`` (a recorded backward pass) and ``compare`` (two graphs side by side).
"""

from .graph import Graph, LayoutError, Node, Trace, diff, draw, record_modules, trace_backward

__all__ = ["draw", "trace_backward", "diff", "record_modules", "Graph", "Trace", "Node", "LayoutError"]

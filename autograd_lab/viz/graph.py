"""Pictures of the autograd graph: ``draw``, ``trace_backward`` and ``diff``.

``draw(loss)`` walks ``loss.grad_fn`` and returns a ``Graph`` that shows inline as
SVG in JupyterLab (as text when graphviz is missing)::

    g = draw(loss)                    # names come from your variables: w, b, x
    g.ops()                           # ['SumBackward0', 'MulBackward0', ...]
    g.stale()                         # ops that will fail in backward
    g.save("graph.svg")

``trace_backward(loss)`` runs the backward pass with hooks and records what the
engine did; ``diff(g1, g2)`` shows what one graph has and the other does not.

A ``Graph`` is a snapshot made of strings: it holds no tensors and no grad_fn
objects, so keeping it around never keeps the autograd graph alive.  Node ids
come from traversal order, so the same code always gives the same DOT text.
"""

from functools import partial
from pathlib import Path

import torch

from . import compare, describe, layout, modules, names as naming, tensor_view
from .dot import to_dot
from .model import Node
from .recorder import record_modules
from .text import to_text
from .trace import Trace, record_backward
from .truncate import truncate
from .walk import Options, walk

__all__ = ["draw", "trace_backward", "diff", "record_modules", "Graph", "Trace", "Node", "LayoutError"]

LayoutError = layout.LayoutError
VIEWS = ("grad_fn", "tensor")
DEFAULT_MAX_NODES = 1000
_TEXT_SUFFIXES = {".dot": "source", ".gv": "source", ".txt": "text"}
_DOT_SUFFIXES = {".svg": "svg", ".png": "png", ".pdf": "pdf"}


class Graph:
    """A drawn autograd graph: ``nodes``, ``edges``, ``source`` (DOT), ``text()``, ``save()``."""

    def __init__(self, model, *, legend=False, layout_timeout=30.0, title=None, placed=None):
        self._model = model
        self.legend = legend
        self.layout_timeout = layout_timeout
        self.title = title
        self._placed = placed     # a function giving a layout made before (a trace's frames share one)
        self._source = None
        self._svg = None

    @property
    def nodes(self):
        """Node records in traversal order (``id``, ``kind``, ``op``, ``name``, ``label``)."""
        return list(self._model.nodes)

    @property
    def edges(self):
        """``(source_id, target_id)`` pairs; an edge points from an input to the node that uses it."""
        return list(self._model.edges)

    @property
    def notes(self):
        """Sentences printed under the graph (why it is empty, what was left out)."""
        return list(self._model.notes)

    @property
    def source(self):
        """The DOT text; the same code always gives the same text."""
        if self._source is None:
            placed = self._placed() if self._placed is not None else None
            self._source = to_dot(self._model, legend=self.legend, title=self.title, placed=placed)
        return self._source

    def text(self):
        """A plain-text tree from each root down to the leaves."""
        return to_text(self._model)

    def ops(self):
        """Class name of every grad_fn in the graph, each once, in traversal order.

        ``AccumulateGrad`` appears once per leaf that requires grad (even when a
        much-used leaf is drawn once per use); the list covers the whole graph
        even when ``max_nodes`` left part of it out of the picture.
        """
        return list(self._model.grad_fns)

    def stale(self):
        """Ops whose saved tensors were modified in place since saving: the next backward will fail."""
        return list(self._model.stale_ops)

    def freed(self):
        """Ops whose saved tensors were freed by a backward without ``retain_graph``."""
        return list(self._model.freed_ops)

    def svg(self):
        """The SVG text (raises ``LayoutError`` when graphviz is missing or too slow)."""
        if self._svg is None:
            # A graph laid out before (a trace frame) is only drawn: nop2 keeps every position.
            engine = "nop2" if self._placed is not None else "dot"
            data = layout.render(self.source, "svg", self.layout_timeout, len(self._model.nodes),
                                 quick=quick_layout(self._model), engine=engine)
            self._svg = data.decode()
        return self._svg

    def save(self, path):
        """Write the graph; the format comes from the suffix (.svg, .png, .pdf, .dot, .txt)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in _TEXT_SUFFIXES:
            path.write_text(self.source if _TEXT_SUFFIXES[suffix] == "source" else self.text() + "\n")
        elif suffix == ".svg":
            path.write_text(self.svg())
        elif suffix in _DOT_SUFFIXES:
            path.write_bytes(layout.render(self.source, _DOT_SUFFIXES[suffix], self.layout_timeout,
                                           len(self._model.nodes)))
        else:
            known = ", ".join(sorted(set(_TEXT_SUFFIXES) | set(_DOT_SUFFIXES)))
            raise ValueError(f"Cannot save a graph as {suffix or 'a file without suffix'!r}: use one of {known}.")
        return path

    def summary(self):
        """One line: what the picture shows (the notebook's plain-text output beside the SVG)."""
        model = self._model
        ops = sum(n.kind == "op" for n in model.nodes)
        return (f"autograd graph: {describe.plural(len(model.nodes), 'node')} ({describe.plural(ops, 'op')}), "
                f"{describe.plural(len(model.edges), 'edge')}; print(g.text()) for the text version")

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The SVG is what is shown and saved; the plain text beside it is one line, not the
        # whole tree (text() of a large graph would be stored in every saved notebook).
        try:
            svg = self.svg()
        except LayoutError as error:
            return {"text/plain": f"{error}\n{self.text()}"}
        return {"image/svg+xml": svg, "text/plain": self.summary()}

    def __str__(self):
        return self.text()

    def __repr__(self):
        return self.text()

    def positions(self):
        """Where graphviz puts each node, edge and frame of this picture (``layout.positions``)."""
        return layout.positions(to_dot(self._model, legend=self.legend, title=self.title), self.layout_timeout,
                                len(self._model.nodes), quick=quick_layout(self._model))

    def _with_model(self, model, **changes):
        options = {"legend": self.legend, "layout_timeout": self.layout_timeout, "title": self.title}
        options.update(changes)
        return Graph(model, **options)


def draw(*roots, params=None, view="grad_fn", show_saved=False, show_attrs=False,
         max_nodes=DEFAULT_MAX_NODES, group_modules=None, depth=None, strip_suffix=False,
         legend=False, split_leaves=None, layout_timeout=30.0, title=None, focus=None):
    """Draw the autograd graph behind ``roots`` and return a ``Graph``.

    ``roots``: tensors, or tuples, lists or dicts of tensors (dict keys name them).
    ``params``: a dict or ``model.named_parameters()`` naming the leaves; without it,
    leaves are named after the caller's variables.  ``view``: ``"grad_fn"`` (the
    real graph) or ``"tensor"`` (micrograd-style: tensors and ``*``, ``@``, ``sum``).
    ``show_saved`` / ``show_attrs``: saved tensors and op attributes.
    ``max_nodes``: draw at most this many nodes, those nearest the output, and
    summarise the rest in one box; ``focus``: a tensor (or list of tensors) of the
    graph whose neighbourhood to keep instead (an intermediate result, a weight).
    ``group_modules``: an ``nn.Module`` whose submodules become clusters; ``depth``
    collapses each module call at that depth (1 = top-level children) into one box.
    Run the forward under ``with record_modules(model):`` and every op, ReLUs and
    residual adds included, is drawn in the innermost module call that ran it (each
    call of a module is its own box, so a collapsed graph has no cycles); without
    the recording, ops are placed by the parameters they read, which leaves
    parameter-free ops outside their blocks.
    ``strip_suffix``: write ``Mul`` instead of ``MulBackward0``.  ``legend``: explain
    colours and shapes.  ``split_leaves``: a leaf used several times is one node
    with one edge per use, as PyTorch has one ``AccumulateGrad`` for it; by default
    (``None``) only a leaf with more than 16 uses (an unrolled RNN's weights) is
    drawn once per use, each copy labelled "w, use k of n", because one node with
    dozens of long edges makes graphviz's layout explode.  ``True`` splits every
    shared leaf, ``False`` none.  ``layout_timeout``: seconds graphviz may
    take before the picture falls back to text with a message.

    An input that needs no grad (a constant) is matched to the op's saved tensor of
    the same argument (``MmBackward0``'s input 1 is ``_saved_mat2``), so it carries
    your variable's name, or else the argument's (``self``, ``mat2``); an op that did
    not save it shows the argument name alone.

    ``draw`` has no side effects: a saved tensor with an unpack hook (activation
    checkpointing) is read only with ``show_saved=True``, since reading it runs the
    hook, which may rerun the forward; a hook that raises makes that tensor
    "unreadable" (the reason is in ``notes``) and the rest is drawn.  This needs
    ``SavedTensor.unpack_hook`` (torch 2.13 and 2.15 have it, 2.5 does not): on a
    torch without it ``draw`` cannot tell a hooked tensor and reads it as before.

    Nodes made by a ``create_graph=True`` backward are grouped under the op whose
    backward made them when that backward ran under ``trace_backward(...,
    create_graph=True)`` or ``torch.autograd.detect_anomaly()``: only then does
    PyTorch record the parent.
    """
    if focus is not None and view != "grad_fn":
        raise ValueError("focus= picks nodes of the grad_fn view; draw with view='grad_fn' to use it.")
    result = _walk_roots(roots, params=params, view=view, show_saved=show_saved,
                         show_attrs=show_attrs, group_modules=group_modules, depth=depth,
                         max_nodes=None if focus is not None else max_nodes, strip_suffix=strip_suffix,
                         split_leaves=split_leaves)
    focus_ids = _focus_ids(result, focus)
    model = _finish_model(result.model, view, group_modules, depth, max_nodes, focus_ids)
    return Graph(model, legend=legend, layout_timeout=layout_timeout, title=title)


def trace_backward(*roots, gradient=None, retain_graph=None, create_graph=False, params=None,
                   strip_suffix=False, max_nodes=DEFAULT_MAX_NODES, legend=False):
    """Run ``backward`` on ``roots`` with hooks and return a ``Trace`` of what the engine did.

    Accepts the arguments of ``torch.autograd.backward`` (``gradient``,
    ``retain_graph``, ``create_graph``).  With ``create_graph=True`` the nodes the
    backward creates are recorded with their parent, so ``draw(x.grad)`` groups them.
    """
    tensors = [t for _, t in _flatten_roots(roots, "trace_backward")]
    names = naming.build_names(params=params, namespace=naming.caller_namespace())
    # Frames are truncated to max_nodes like draw's picture: label only what they can show.
    roots = [(None, t) for t in tensors]
    options = Options(strip_suffix=strip_suffix, label_limit=max_nodes)
    before = walk(roots, names, options)
    record = record_backward(tensors, gradient=gradient, retain_graph=retain_graph,
                             create_graph=create_graph)
    after = walk(roots, names, options)
    return Trace(record, before, after, names, partial(Graph, legend=legend), truncate_to=max_nodes)


def diff(a, b):
    """A ``Graph`` that highlights what ``a`` has and ``b`` lacks (``only_in_a``) and the reverse."""
    for graph in (a, b):
        if not isinstance(graph, Graph):
            raise TypeError(f"diff() compares two graphs made by draw(); got {type(graph).__name__}.")
    model, only_a, only_b = compare.diff_models(a._model, b._model)
    out = a._with_model(model, legend=True)
    out.only_in_a = only_a
    out.only_in_b = only_b
    return out


def _walk_roots(roots, *, params, view, show_saved, show_attrs, group_modules, depth, max_nodes,
                strip_suffix, split_leaves):
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}; got {view!r}.")
    if group_modules is not None and not isinstance(group_modules, torch.nn.Module):
        raise TypeError(f"group_modules= expects an nn.Module; got {type(group_modules).__name__}.")
    if depth is not None and group_modules is None:
        raise ValueError("depth= collapses modules, so it needs group_modules=model as well.")
    if max_nodes is not None and (not isinstance(max_nodes, int) or max_nodes < 1):
        raise ValueError(f"max_nodes must be a whole number >= 1, or None to draw everything; got {max_nodes!r}.")
    named_roots = _flatten_roots(roots, "draw")
    names = naming.build_names(params=params, group_modules=group_modules,
                               namespace=naming.caller_namespace(),
                               root_names=[(n, t) for n, t in named_roots if n])
    # Labels are made only for nodes that can be drawn: past max_nodes (in traversal
    # order) nothing is shown unless modules are collapsed into fewer boxes.
    label_limit = max_nodes if group_modules is None and view == "grad_fn" else None
    options = Options(show_saved=show_saved, show_attrs=show_attrs, strip_suffix=strip_suffix,
                      split_leaves=split_leaves, values=view == "tensor", label_limit=label_limit)
    module_of = modules.parameter_paths(group_modules) if group_modules is not None else None
    return walk(named_roots, names, options, module_of)


def _finish_model(model, view, group_modules, depth, max_nodes, focus_ids=()):
    if model.recorded_modules:
        model = modules.place_leaves(model)
    elif group_modules is not None:
        model = modules.assign_ops(model, group_modules)
    else:
        model = modules.frame_segments(model)
    if any(n.cluster for n in model.nodes):
        model = modules.place_inputs(model, kinds=("constant", "saved"))
    if group_modules is not None and depth is not None:
        model = modules.collapse(model, depth)
    if view == "tensor":
        model = tensor_view.tensor_view(model)
    present = {n.id for n in model.nodes}
    focus = [i for i in focus_ids if i in present]
    if focus_ids and not focus:
        model.notes.append("focus= names nodes that are inside a collapsed module: the part nearest "
                           "the output is shown instead (draw without depth= to focus on them).")
    return modules.bound_clusters(truncate(model, max_nodes, focus))


def _focus_ids(result, focus):
    """Node ids of the ``focus=`` tensors: the op that made each, or the leaf itself."""
    if focus is None:
        return []
    tensors = [t for _, t in _flatten_roots((focus,), "focus")]
    ids = []
    for tensor in tensors:
        fn = tensor.grad_fn
        if fn is None:
            fn = next((f for f in result.op_ids if type(f).__name__ == "AccumulateGrad"
                       and f.variable is tensor), None)
        if fn not in result.op_ids:
            raise ValueError("focus= takes tensors of the drawn graph (an intermediate result or a leaf "
                             "it uses); this one is not part of it.")
        ids += result.leaf_uses.get(fn, [result.op_ids[fn]])
    return ids


def quick_layout(model):
    """Whether graphviz lays this graph out quickly enough to run in this process (see layout.py)."""
    if len(model.nodes) > layout.IN_PROCESS_MAX_NODES or any(n.cluster for n in model.nodes):
        return False
    degree = {}
    for src, dst in model.edges:
        degree[src] = degree.get(src, 0) + 1
        degree[dst] = degree.get(dst, 0) + 1
    return max(degree.values(), default=0) <= layout.IN_PROCESS_MAX_DEGREE


def _flatten_roots(roots, caller):
    """(name or None, tensor) pairs from tensors and tuples, lists or dicts of them."""
    if not roots:
        raise TypeError(f"{caller}() needs at least one tensor, for example {caller}(loss).")
    flat, pending = [], [(None, r) for r in reversed(roots)]
    while pending:
        name, item = pending.pop()
        if isinstance(item, torch.Tensor):
            flat.append((name, item))
        elif isinstance(item, dict):
            pending += [(str(k), v) for k, v in reversed(list(item.items()))]
        elif isinstance(item, (list, tuple)):
            pending += [(None, v) for v in reversed(item)]
        else:
            raise TypeError(
                f"{caller}() expects tensors, or tuples, lists or dicts of tensors; got "
                f"{type(item).__name__}. Pass the tensor you computed, for example {caller}(loss)."
            )
    if not flat:
        raise TypeError(f"{caller}() was given an empty container; pass at least one tensor.")
    return flat

"""Record a backward pass with hooks: execution order, gradients on edges, accumulations.

``record_backward`` registers a pre-hook and a hook on every node of the graph,
runs ``torch.autograd.backward`` and removes the hooks again, even on error.
``Trace`` then turns the records into names, node ids and one frame per step.
"""

import hashlib
import html
import warnings
from dataclasses import dataclass, field

import torch

from . import describe
from .layout import LayoutError
from .truncate import truncate

KEY_FRAMES = 3   # without ipywidgets: first, middle and last step, then a table of every step


@dataclass
class Record:
    """What the engine did, still in terms of grad_fn objects (dropped once ``Trace`` is built)."""

    order: list = field(default_factory=list)          # grad_fn, in execution order
    accumulations: list = field(default_factory=list)  # (AccumulateGrad, gradient)
    flows: list = field(default_factory=list)          # (step, grad_fn, input number, next grad_fn, gradient)


def _all_nodes(tensors):
    seen, stack = {}, [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen[fn] = None
        stack += [next_fn for next_fn, _ in fn.next_functions]
    return list(seen)


def _snapshot(grad):
    return None if grad is None else grad.detach().clone()


def _hooks_for(fn, record):
    def before(grad_outputs):
        record.order.append(fn)
        if type(fn).__name__ == "AccumulateGrad":
            record.accumulations.append((fn, _snapshot(grad_outputs[0])))

    def after(grad_inputs, grad_outputs):
        step = len(record.order)
        for i, (next_fn, _) in enumerate(fn.next_functions):
            if next_fn is not None and i < len(grad_inputs) and grad_inputs[i] is not None:
                record.flows.append((step, fn, i, next_fn, _snapshot(grad_inputs[i])))

    return before, after


def record_backward(tensors, gradient=None, retain_graph=None, create_graph=False):
    for t in tensors:
        if t.grad_fn is None and not t.requires_grad:
            raise RuntimeError(
                "trace_backward() needs a tensor with a graph: this one has no grad_fn and does not "
                "require grad. Set requires_grad=True on an input before the forward pass."
            )
    if isinstance(gradient, torch.Tensor):
        gradient = [gradient]
    record, handles = Record(), []
    try:
        for fn in _all_nodes(tensors):
            before, after = _hooks_for(fn, record)
            handles += [fn.register_prehook(before), fn.register_hook(after)]
        _backward(tensors, gradient, retain_graph, create_graph)
    finally:
        for handle in handles:
            handle.remove()
    return record


def _backward(tensors, gradient, retain_graph, create_graph):
    if not create_graph:
        torch.autograd.backward(tensors, grad_tensors=gradient, retain_graph=retain_graph)
        return
    # Anomaly mode makes the engine tag each node it creates with its parent
    # (metadata["parent_"]), which is how draw() groups a double-backward graph.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch.autograd.detect_anomaly(check_nan=False):
            torch.autograd.backward(tensors, grad_tensors=gradient, retain_graph=retain_graph,
                                    create_graph=True)


class Frames:
    """``trace.frames``: a read-only sequence whose frames are built when first looked at.

    A 100-step RNN runs hundreds of backward steps; building every frame up front
    would copy the whole graph hundreds of times for pictures nobody may look at.
    """

    def __init__(self, build, count):
        self._build = build
        self._count = count
        self._cache = {}

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"frame {index} out of range: this backward ran {self._count} steps")
        index %= self._count
        if index not in self._cache:
            self._cache[index] = self._build(index + 1)
        return self._cache[index]

    def __iter__(self):
        return (self[i] for i in range(self._count))


class Trace:
    """The recorded backward: ``order``, ``accumulations``, ``edge_grads``, ``frames``, ``graph``.

    ``before`` and ``after`` are walks of the same graph made before and after the
    backward pass (same traversal, so the same ids).  A frame shows each node as it
    was before the engine reached it and as it is after, so a leaf's ``.grad`` and
    an op's freed buffers change exactly at their step.
    """

    def __init__(self, record, before, after, names, graph_factory, truncate_to=None):
        self._graph_factory = graph_factory
        self._truncate_to = truncate_to
        self._before, self._after = before.model, after.model
        node_ids = {fn: after.leaf_uses.get(fn, [node_id]) for fn, node_id in after.op_ids.items()}
        self.order = [type(fn).__name__ for fn in record.order]
        self.accumulations = [(names.tensor_name(fn.variable) or "leaf", grad)
                              for fn, grad in record.accumulations]
        self.edge_grads = [(type(fn).__name__, type(next_fn).__name__, grad)
                           for _, fn, _, next_fn, grad in record.flows]
        self._step_nodes = [node_ids.get(fn, []) for fn in record.order]
        self.steps = _step_rows(record, node_ids)
        self._flows = []   # (step, (src id, dst id), label)
        for step, fn, i, _, grad in record.flows:
            consumer = after.op_ids.get(fn)
            child = after.input_ids.get((consumer, i))
            if child is not None:
                self._flows.append((step, (child, consumer), describe.values_text(grad)))
        self._placed = None
        self.graph = self._frame(len(self.order), current=False)
        self.frames = Frames(self._frame, len(self.order))

    def _layout(self):
        """One layout for every frame: the last step's picture, with the longest title, laid out once.

        Frames are drawn on it with ``nop2`` (no layout), so nodes keep their places from
        step to step; boxes keep the size of their largest label (the executed one).
        """
        if self._placed is None:
            model, _ = self._frame_model(len(self.order), current=True)
            titles = [self._title(k) for k in range(1, len(self.order) + 1)]
            widest = max(titles, key=len, default=None)
            self._placed = self._graph_factory(model, title=widest).positions()
        return self._placed

    def _title(self, upto):
        return f"step {upto} of {len(self.order)}: {self.order[upto - 1]}"

    def _frame(self, upto, current=True):
        """Step ``upto``'s picture (``current=False``: the whole trace, on the same layout)."""
        model, title = self._frame_model(upto, current)
        return self._graph_factory(model, title=title, placed=self._layout if self.order else None)

    def _frame_model(self, upto, current):
        steps = {}
        for k, ids in enumerate(self._step_nodes[:upto], 1):
            for node_id in ids:
                steps.setdefault(node_id, k)
        before = self._before.by_id()
        # Constants lose their names once their saved copy is freed: take them from before.
        nodes = [node if node.id in steps and node.kind != "constant" else before.get(node.id, node)
                 for node in self._after.nodes]
        model = self._after.copy(nodes=nodes)
        for node in model.nodes:
            node.step = steps.get(node.id)
            if current and node.step == upto:
                node.mark = "current"
        model.edge_labels = {edge: label for step, edge, label in self._flows if step <= upto}
        return truncate(model, self._truncate_to), self._title(upto) if current else None

    def text(self):
        lines = [f"step {k}: {name}" for k, name in enumerate(self.order, 1)]
        lines += [f"{a} -> {b}: {describe.values_text(g)}" for a, b, g in self.edge_grads]
        lines += [f"{name}.grad += {describe.values_text(g)}" for name, g in self.accumulations]
        return "\n".join(lines)

    def __repr__(self):
        return self.text()

    def key_steps(self):
        """Step numbers shown as pictures when there is no slider: first, middle, last."""
        count = len(self.frames)
        return sorted({1, (count + 1) // 2, count}) if count else []

    def table_html(self):
        """One row per step: order, node, and the gradient (shape, norm) sent along each edge."""
        head = "<tr><th>step</th><th>node</th><th>gradient sent to each input</th></tr>"
        rows = [f"<tr><td>{k}</td><td>{html.escape(node)}</td><td>{html.escape('; '.join(flows) or '-')}</td></tr>"
                for k, node, flows in self.steps]
        return f"<table>{head}{''.join(rows)}</table>"

    def _repr_mimebundle_(self, include=None, exclude=None):
        """Without ipywidgets: pictures of a few key steps (one layout) and a table of every step."""
        shown = self.key_steps()
        parts = [f"<p>{len(self.frames)} backward steps; pictures of steps {', '.join(map(str, shown))} "
                 "(every step: trace.frames[k]; with ipywidgets, a slider).</p>"]
        for k in shown:
            frame = self.frames[k - 1]
            try:
                parts.append(f"<div><p><b>{html.escape(frame.title)}</b></p>{frame.svg()}</div>")
            except LayoutError as error:
                return {"text/plain": f"{error}\n{self.text()}"}
        parts.append(self.table_html())
        return {"text/html": "\n".join(parts), "text/plain": self.summary()}

    def summary(self):
        return f"backward trace: {len(self.order)} steps; print(trace.text()) for every step and gradient"

    def _ipython_display_(self):
        from IPython.display import display
        try:
            import ipywidgets
        except ImportError:
            display(self._repr_mimebundle_(), raw=True)
            return
        # The slider lives only as long as the kernel: a saved notebook reopened later has
        # no widget to show.  So the whole trace is also shown as a plain picture, which
        # the notebook saves; the live slider hides it, and after a reopen it hides the
        # widget's "model not found" line instead (both with CSS scoped to this output).
        key = "autograd-lab-trace-" + hashlib.sha1(self.text().encode()).hexdigest()[:12]
        display({"text/html": _static_note(key, len(self.order)), "text/plain": self.summary()}, raw=True)
        display(self.graph)
        display(_slider(self.frames, ipywidgets, hide=key))


def _static_note(key, steps):
    hide_widget_note = (f".jp-OutputArea-child:has(#{key}) + .jp-OutputArea-child + .jp-OutputArea-child "
                        ".jupyter-widgets:not(:has(*)) {display: none}")
    return (f'<div id="{key}" class="autograd-lab-trace-static"><style>{hide_widget_note}</style>'
            f"<p>The backward pass, all {steps} steps at once: each node carries the number of the step "
            "that ran it (#k), each edge the gradient it sent. Run the cell in JupyterLab to step through it "
            "with a slider.</p></div>")


def _step_rows(record, node_ids):
    """(step, "Op [node id]", ["-> NextOp[i]: shape norm", ...]) for every step, in order."""
    flows = {}
    for step, _, i, next_fn, grad in record.flows:
        flows.setdefault(step, []).append(f"-> {type(next_fn).__name__}[{i}]: {_grad_summary(grad)}")
    accumulated = iter(grad for _, grad in record.accumulations)
    rows = []
    for k, fn in enumerate(record.order, 1):
        ids = ", ".join(node_ids.get(fn, [])[:1])
        sent = flows.get(k, [])
        if type(fn).__name__ == "AccumulateGrad":
            sent = [f"into .grad: {_grad_summary(next(accumulated, None))}"]
        rows.append((k, f"{type(fn).__name__} [{ids}]" if ids else type(fn).__name__, sent))
    return rows


def _grad_summary(grad):
    if grad is None:
        return "None"
    return describe.norm_text(grad)


def _slider(frames, widgets, hide=None):
    """A slider that shows one frame at a time (only when ipywidgets is installed).

    ``hide``: the id of the trace's static picture, hidden while the slider is alive.
    """
    from IPython.display import display
    slider = widgets.IntSlider(value=1, min=1, max=max(1, len(frames)), description="step")
    screen = widgets.Output()

    def show(change):
        screen.clear_output(wait=True)
        with screen:
            display(frames[change["new"] - 1])

    slider.observe(show, names="value")
    show({"new": 1})
    children = [slider, screen]
    if hide:
        rule = (f".jp-OutputArea-child:has(#{hide}), .jp-OutputArea-child:has(#{hide}) + .jp-OutputArea-child "
                "{display: none}")
        children.append(widgets.HTML(f"<style>{rule}</style>"))
    return widgets.VBox(children)

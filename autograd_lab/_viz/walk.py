"""Walk ``grad_fn.next_functions`` breadth-first and turn what it finds into a ``Model``.

The walk is iterative (a queue, no recursion), so a 1000-step RNN is no problem.
Ids come from the order in which nodes are first reached.  Each use of a leaf
gets its own small node, which keeps graphviz's layout near-linear where one shared
node with a hundred long edges would make it explode.
"""

from collections import deque
from dataclasses import dataclass, field

import torch

from . import describe
from .model import Model, Node


@dataclass
class Options:
    show_saved: bool = False
    show_attrs: bool = False
    strip_suffix: bool = False
    split_leaves: bool = True


@dataclass
class WalkResult:
    """The model plus the transient maps that ``trace_backward`` needs to place its records."""

    model: Model
    op_ids: dict = field(default_factory=dict)      # grad_fn -> node id (AccumulateGrad: first use)
    leaf_uses: dict = field(default_factory=dict)   # AccumulateGrad -> ids of every node drawn for it
    input_ids: dict = field(default_factory=dict)   # (consumer id, input number) -> input node id


def walk(roots, names, options, module_of=None):
    """``roots``: list of (name or None, tensor).  Returns a ``WalkResult``."""
    walker = _Walker(names, options, module_of or {})
    for name, tensor in roots:
        walker.add_root(name, tensor)
    walker.run()
    return walker.finish()


class _Walker:
    def __init__(self, names, options, module_of):
        self.names = names
        self.options = options
        self.module_of = module_of
        self.model = Model()
        self.result = WalkResult(self.model)
        self.queue = deque()          # (fn or None, consumer id, input number)
        self.constants = {}           # (consumer id, input number) -> tensor, when known
        self.parents = {}             # node id -> grad_fn whose backward created it
        self.leaf_fields = {}         # AccumulateGrad -> fields of its node, reused for every use

    # -- nodes -------------------------------------------------------------
    def new_node(self, kind, label, op=None, name=None, **fields):
        node = Node(f"n{len(self.model.nodes)}", kind, op, name, label, **fields)
        self.model.nodes.append(node)
        return node

    def edge(self, src, dst, kind=None):
        self.model.edges.append((src, dst))
        if kind:
            self.model.edge_kinds[(src, dst)] = kind

    def add_root(self, name, tensor):
        name = name or self.names.tensor_name(tensor)
        shape = tuple(tensor.shape)
        if tensor.grad_fn is None and tensor.requires_grad:
            self.leaf_node(tensor, name)
            return
        if tensor.grad_fn is None:
            self.no_history_root(name, tensor)
            return
        value = describe.values_text(tensor)
        grad = describe.grad_text(tensor) if tensor.retains_grad else None
        lines = [f"{name or 'output'} {describe.shape_text(shape)}", "= " + value, grad]
        if tensor._is_view():
            lines.append("view of " + (self.names.tensor_name(tensor._base) or "another tensor"))
        root = self.new_node("tensor", "\n".join(line for line in lines if line), name=name,
                             shape=shape, value=value, grad=grad)
        self.queue.append((tensor.grad_fn, root.id, 0))

    def no_history_root(self, name, tensor):
        label = f"{name or 'tensor'} {describe.shape_text(tensor.shape)}\nno grad_fn, requires_grad=False"
        self.new_node("constant", label, name=name, shape=tuple(tensor.shape), state="nograd")
        who = name or "this tensor"
        if tensor.is_inference():
            why = (f"{who} was made under torch.inference_mode(), which records no graph; "
                   "compute it outside inference_mode (and outside no_grad) to draw its graph.")
        else:
            why = (f"Nothing to draw: {who} has no grad_fn and does not require grad, so autograd "
                   "recorded no history. Set requires_grad=True on an input before the forward pass.")
        self.model.notes.append(why)

    def leaf_node(self, tensor, name=None):
        name = name or self.names.tensor_name(tensor)
        grad = describe.grad_text(tensor)
        label = "\n".join([
            f"{name or 'leaf'} {describe.shape_text(tensor.shape)}",
            f"requires_grad={tensor.requires_grad}",
            grad,
        ])
        cluster = self.module_of.get(id(tensor), ())
        return self.new_node("leaf", label, name=name, shape=tuple(tensor.shape), cluster=cluster,
                             value=describe.values_text(tensor), grad=grad)

    def constant_node(self, key):
        tensor = self.constants.get(key)
        if tensor is None:
            return self.new_node("constant", "constant\nno grad", state="nograd")
        name = self.names.tensor_name(tensor)
        value = describe.values_text(tensor)
        shown = f"\n= {value}" if tensor.numel() <= describe.SMALL else ""
        label = f"{name or 'constant'} {describe.shape_text(tensor.shape)}{shown}\nno grad"
        return self.new_node("constant", label, name=name, shape=tuple(tensor.shape), state="nograd",
                             value=value)

    def op_node(self, fn):
        name, output = self.names.output(fn)
        shapes = describe.output_shapes(fn)
        lines = [describe.op_name(fn, self.options.strip_suffix)]
        shape_part = " ".join(describe.shape_text(s) for s in shapes)
        lines.append(f"{name} {shape_part}" if name else shape_part)
        grad = describe.grad_text(output) if output is not None and output.retains_grad else None
        lines.append(grad)
        node = self.new_node("op", "", op=type(fn).__name__, name=name,
                             shape=shapes[0] if len(shapes) == 1 else None, grad=grad,
                             value=describe.values_text(output) if output is not None else None)
        saved = describe.saved_entries(fn)
        lines += self.saved_state_lines(node, saved)
        if self.options.show_attrs:
            lines += [f"{s.name}={describe.attr_text(s.value)}" for s in saved if not s.is_tensor]
        node.label = "\n".join(line for line in lines if line)
        self.match_constants(fn, node.id, saved)
        if self.options.show_saved:
            self.saved_nodes(node.id, saved)
        parent = fn.metadata.get("parent_") if fn.metadata else None
        if parent is not None:
            self.parents[node.id] = parent
        return node

    def saved_state_lines(self, node, saved):
        stale = [s for s in saved if s.state == "stale"]
        freed = [s for s in saved if s.state == "freed"]
        if stale:
            node.state = "stale"
            self.model.stale_ops.append(node.op)
            return [f"STALE: saved {s.name} modified in place ({s.detail})" for s in stale]
        if freed:
            node.state = "freed"
            self.model.freed_ops.append(node.op)
            return ["saved tensors freed"]
        return []

    def saved_nodes(self, op_id, saved):
        for s in saved:
            if not s.is_tensor:
                continue
            lines = [f"saved {s.name}"]
            if s.tensor is not None:
                lines.append(describe.tensor_text(s.tensor))
                known = self.names.tensor_name(s.tensor)
                if known:
                    lines.append("= " + known)
            lines.append({"ok": "", "freed": "freed", "stale": f"STALE ({s.detail})"}[s.state])
            shape = tuple(s.tensor.shape) if s.tensor is not None else None
            node = self.new_node("saved", "\n".join(line for line in lines if line), name=s.name,
                                 shape=shape, state=s.state)
            self.edge(node.id, op_id, "saved")

    def match_constants(self, fn, op_id, saved):
        """Pair inputs that need no gradient with the saved tensors that need none, when unambiguous."""
        missing = [i for i, (nf, _) in enumerate(fn.next_functions) if nf is None]
        # A bool mask (torch.where) is saved but is never one of the op's inputs.
        plain = [s.tensor for s in saved if s.tensor is not None and not s.tensor.requires_grad
                 and s.tensor.dtype != torch.bool]
        if missing and len(missing) == len(plain):
            for i, tensor in zip(missing, plain):
                self.constants[(op_id, i)] = tensor

    # -- traversal ---------------------------------------------------------
    def run(self):
        op_ids = self.result.op_ids
        while self.queue:
            fn, consumer, input_nr = self.queue.popleft()
            if fn is None:
                child = self.constant_node((consumer, input_nr)).id
            elif type(fn).__name__ == "AccumulateGrad":
                child = self.accumulate_node(fn)
            elif fn in op_ids:
                child = op_ids[fn]
            else:
                child = self.op_node(fn).id
                op_ids[fn] = child
                self.model.grad_fns.append(type(fn).__name__)
                for i, (next_fn, _) in enumerate(fn.next_functions):
                    self.queue.append((next_fn, child, i))
            self.edge(child, consumer)
            self.result.input_ids[(consumer, input_nr)] = child

    def accumulate_node(self, fn):
        op_ids = self.result.op_ids
        if fn in op_ids and not self.options.split_leaves:
            return op_ids[fn]
        if fn in self.leaf_fields:
            node = self.new_node("leaf", **self.leaf_fields[fn])
        else:
            node = self.leaf_node(fn.variable)
            self.leaf_fields[fn] = {k: getattr(node, k) for k in ("label", "name", "shape", "cluster",
                                                                 "value", "grad")}
        if fn not in op_ids:
            op_ids[fn] = node.id
            self.model.grad_fns.append("AccumulateGrad")
        self.result.leaf_uses.setdefault(fn, []).append(node.id)
        return node.id

    def finish(self):
        ids = self.result.op_ids
        for node_id, parent in self.parents.items():
            node = self.model.node(node_id)
            if node.cluster:
                continue
            where = f" [{ids[parent]}]" if parent in ids else ""
            path = (f"made by the backward of {type(parent).__name__}{where}",)
            node.cluster = path
            self.model.cluster_labels[path] = path[0]
        return self.result


def truncate(model, max_nodes):
    """Keep the first ``max_nodes`` nodes and say honestly how many were left out."""
    if max_nodes is None or len(model.nodes) <= max_nodes:
        return model
    kept = model.nodes[:max_nodes]
    kept_ids = {n.id for n in kept}
    hidden = len(model.nodes) - len(kept)
    summary = Node("n_more", "summary", None, None,
                   f"+{hidden} more nodes\n(max_nodes={max_nodes}; raise it to see them)")
    out = model.copy(nodes=kept + [summary])
    out.edges = []
    for src, dst in model.edges:
        if dst not in kept_ids:
            continue
        out.edges.append((src, dst) if src in kept_ids else (summary.id, dst))
    out.edges = list(dict.fromkeys(out.edges))  # several hidden inputs of one node: one edge
    out.notes.append(f"Showing {max_nodes} of {len(model.nodes)} nodes; "
                     f"the other {hidden} are summarised in one box.")
    return out

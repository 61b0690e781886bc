"""The beginner's view, micrograd-style: tensors alternate with small op nodes.

Each grad_fn node becomes an op node drawn as its symbol (``*``, ``@``, ``sum``)
followed by a tensor node for its output (name, shape, value or grad when known).
Ids are renumbered in the new traversal order.
"""

import re
from dataclasses import replace

from .describe import shape_text
from .model import Model

SYMBOLS = {
    "Add": "+", "Sub": "-", "Rsub": "-", "Mul": "*", "Div": "/", "Neg": "neg", "Pow": "**",
    "Mm": "@", "Mv": "@", "Bmm": "@", "Dot": "@", "Matmul": "@", "Addmm": "x @ W + b",
    "Sum": "sum", "Mean": "mean", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Sigmoid": "sigmoid",
    "Relu": "relu", "T": "transpose", "Transpose": "transpose", "View": "view",
    "Reshape": "reshape", "Unsafe View": "view", "Expand": "expand", "Select": "[i]", "Slice": "[a:b]",
    "Clone": "clone", "Sqrt": "sqrt", "Abs": "abs", "Max": "max", "Min": "min",
}
_SUFFIX = re.compile(r"Backward\d*$")


def symbol(op):
    base = _SUFFIX.sub("", op or "")
    return SYMBOLS.get(base, base.lower() or "?")


def tensor_label(node):
    """name, shape, then data and grad when known: what micrograd shows on every node."""
    default = {"leaf": "leaf", "constant": "constant", "tensor": "tensor"}.get(node.kind, "")
    shape = shape_text(node.shape) if node.shape is not None else ""
    lines = [f"{node.name or node.arg or default} {shape}".strip()]
    if node.value:
        lines.append("data " + node.value)
    if node.grad:
        lines.append(node.grad)
    if node.kind == "constant":
        lines.append("no grad")
    return "\n".join(lines)


def tensor_view(model):
    """A new ``Model`` in the tensor-centric view of ``model`` (a grad_fn view)."""
    return _TensorView(model).build()


class _TensorView:
    def __init__(self, model):
        self.model = model
        self.by_id = model.by_id()
        self.out = Model(cluster_labels=dict(model.cluster_labels), notes=list(model.notes),
                         stale_ops=list(model.stale_ops), freed_ops=list(model.freed_ops),
                         grad_fns=list(model.grad_fns))
        self.new_id = {}     # old id -> id of its replacement
        self.output_of = {}  # old id -> id of the tensor node holding its output

    def add(self, old, kind, label):
        node = replace(old, id=f"n{len(self.out.nodes)}", kind=kind, label=label,
                       op=old.op if kind == "op" else None)
        self.out.nodes.append(node)
        return node.id

    def build(self):
        roots_of = {src: dst for src, dst in self.model.edges
                    if self.by_id[src].kind == "op" and self.by_id[dst].kind == "tensor"}
        for old in self.model.nodes:
            if old.kind == "op":
                self.new_id[old.id] = self.add(old, "op", symbol(old.op))
                if old.id not in roots_of:
                    self.output_of[old.id] = self.add(old, "tensor", tensor_label(old))
            else:
                keep = old.kind in ("saved", "summary")
                self.new_id[old.id] = self.add(old, old.kind, old.label if keep else tensor_label(old))
                self.output_of[old.id] = self.new_id[old.id]
        # A root tensor is the output of the op that feeds it: reuse it instead of a copy.
        for op_id, root_id in roots_of.items():
            self.output_of[op_id] = self.new_id[root_id]
        edges = self.out.edges
        for old in self.model.nodes:
            if old.kind == "op":
                edges.append((self.new_id[old.id], self.output_of[old.id]))
        for src, dst in self.model.edges:
            if roots_of.get(src) == dst:
                continue  # already drawn as op -> its output
            edge = (self.output_of[src], self.new_id[dst])
            edges.append(edge)
            if (src, dst) in self.model.edge_kinds:
                self.out.edge_kinds[edge] = self.model.edge_kinds[(src, dst)]
        self.out.edges = list(dict.fromkeys(edges))
        return self.out

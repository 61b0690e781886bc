"""Walk ``grad_fn.next_functions`` breadth-first and turn what it finds into a ``Model``.

The walk is iterative (a queue, no recursion), so a 1000-step RNN is no problem.
Ids come from the order in which nodes are first reached.  A leaf used several
times is one node with one edge per use, as PyTorch has one ``AccumulateGrad``
for it.  Only a leaf with more than ``MAX_SHARED_USES`` uses (an RNN's weights)
is split into one labelled copy per use: one node with dozens of long edges makes
graphviz's layout explode (measured with dot 2.43 on an RNN unrolled T steps,
where each weight has T uses: 0.04 s of dot CPU time at T=10, 0.42 s at 17,
0.85 s at 20, more than 40 s at 30; split, every T up to 80 takes under 0.1 s).
"""

from collections import defaultdict, deque
from dataclasses import dataclass, field, replace

import torch

from . import describe, inputs, recorder
from .model import Model, Node

CHECKPOINT_NOTE = ("Ops in a 'checkpointed segment' frame ran under torch.utils.checkpoint: their saved "
                   "tensors are dropped after the forward and recomputed in backward by running the segment "
                   "again. They are never read here, not even with show_saved=True: each read would rerun "
                   "the segment's forward (BatchNorm's counters and the RNG state would move).")
REENTRANT_NOTE = ("CheckpointFunctionBackward stands for a whole segment checkpointed with use_reentrant=True: "
                  "its ops are not in this graph; backward runs them again and differentiates them then.")
HOOKED_NOTE = ("Saved tensors with unpack hooks (activation checkpointing, offloading) were not read: "
               "reading one runs its hook, which may rerun the forward. Pass show_saved=True to read them.")


@dataclass
class Options:
    show_saved: bool = False
    show_attrs: bool = False
    strip_suffix: bool = False
    split_leaves: bool | None = None   # None: split only leaves with > MAX_SHARED_USES uses
    values: bool = False               # values and norms of leaves/outputs (the tensor view shows them)
    label_limit: int | None = None     # nodes past this many are never drawn: give them short labels


MAX_SHARED_USES = 16

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
        self.constants = {}           # (consumer id, input number) -> inputs.Input
        self.parents = {}             # node id -> grad_fn whose backward created it
        self.absent = set()           # (consumer id, input number) of optional inputs given as None
        self.segments = {}            # checkpoint call -> its number (only while walking)

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
        shape = describe.shape_of(tensor)
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
        label = f"{name or 'tensor'} {describe.shape_text(describe.shape_of(tensor))}\nno grad_fn, requires_grad=False"
        self.new_node("constant", label, name=name, shape=describe.shape_of(tensor), state="nograd")
        who = name or "this tensor"
        if describe.is_batched(tensor):
            why = (f"{who} is a vmap-batched tensor seen inside the function: this per-example view has no "
                   "grad_fn, but autograd does record the batched computation. Draw what vmap returns "
                   "(draw(vmap(f)(x)) has a grad_fn when x requires grad), or call f on one example and draw that.")
        elif tensor.is_inference():
            why = (f"{who} was made under torch.inference_mode(), which records no graph; "
                   "compute it outside inference_mode (and outside no_grad) to draw its graph.")
        else:
            why = (f"Nothing to draw: {who} has no grad_fn and does not require grad, so autograd "
                   "recorded no history. Set requires_grad=True on an input before the forward pass.")
        self.model.notes.append(why)

    def leaf_node(self, tensor, name=None):
        name = name or self.names.tensor_name(tensor)
        if self.past_limit():
            return self.new_node("leaf", name or "leaf", name=name, shape=describe.shape_of(tensor))
        grad = describe.grad_text(tensor)
        label = "\n".join([
            f"{name or 'leaf'} {describe.shape_text(describe.shape_of(tensor))}",
            f"requires_grad={tensor.requires_grad}",
            grad,
        ])
        cluster = self.module_of.get(id(tensor), ())
        value = describe.values_text(tensor) if self.options.values else None
        return self.new_node("leaf", label, name=name, shape=describe.shape_of(tensor), cluster=cluster,
                             value=value, grad=grad)

    def past_limit(self):
        limit = self.options.label_limit
        return limit is not None and len(self.model.nodes) >= limit

    def constant_node(self, key):
        """A constant input, named by the caller's variable, else by the op's argument (``mat2``)."""
        found = self.constants.get(key)
        arg = found.arg if found else None
        if found is None or found.tensor is None or self.past_limit():
            return self.new_node("constant", f"{arg or 'constant'}\nno grad", arg=arg, state="nograd")
        tensor = found.tensor
        name = self.names.saved_name(tensor)
        # The value is shown only when small; a norm of a large input is for the tensor view.
        small = tensor.numel() <= describe.SMALL
        value = describe.values_text(tensor) if small or self.options.values else None
        shown = f"\n= {value}" if small else ""
        label = f"{name or arg or 'constant'} {describe.shape_text(describe.shape_of(tensor))}{shown}\nno grad"
        return self.new_node("constant", label, name=name, arg=arg, shape=describe.shape_of(tensor),
                             state="nograd", value=value)

    def op_node(self, fn):
        absent = describe.absent_inputs(fn)
        node = self.labelled_op_node(fn, absent)
        self.absent.update((node.id, i) for i in absent)
        tag = fn.metadata.get(recorder.KEY)
        if tag is not None:   # record_modules(model) saw which module call made it
            node.cluster, titles = tag
            self.model.recorded_modules = True
            for depth in range(1, len(node.cluster) + 1):
                path = node.cluster[:depth]
                self.model.cluster_labels.setdefault(path, titles.get(path, ".".join(path)))
        return node

    def labelled_op_node(self, fn, absent):
        if self.past_limit() and not self.options.show_saved:
            # Never drawn (max_nodes): only its state, so g.stale() still covers the whole graph.
            node = self.new_node("op", type(fn).__name__, op=type(fn).__name__)
            self.saved_state_lines(node, describe.saved_entries(fn, attrs=False))
            return node
        name, output = self.names.output(fn)
        shapes = describe.output_shapes(fn)
        lines = [describe.op_name(fn, self.options.strip_suffix)]
        shape_part = " ".join(describe.shape_text(s) for s in shapes)
        lines.append(f"{name} {shape_part}" if name else shape_part)
        grad = describe.grad_text(output) if output is not None and output.retains_grad else None
        lines.append(grad)
        node = self.new_node("op", "", op=type(fn).__name__, name=name,
                             shape=shapes[0] if len(shapes) == 1 else None, grad=grad,
                             value=describe.values_text(output)
                             if output is not None and self.options.values else None)
        saved = describe.saved_entries(fn, read_hooked=self.options.show_saved, attrs=self.options.show_attrs)
        lines += self.saved_state_lines(node, saved)
        if self.options.show_attrs:
            lines += [f"{s.name}={describe.attr_text(s.value)}" for s in saved if not s.is_tensor]
        node.label = "\n".join(line for line in lines if line)
        self.match_constants(fn, node.id, saved, absent)
        if self.options.show_saved:
            self.saved_nodes(node.id, saved)
        parent = fn.metadata.get("parent_")   # anomaly mode's record of the op whose backward made fn
        if parent is not None:
            self.parents[node.id] = parent
        return node

    def saved_state_lines(self, node, saved):
        if node.op != "CheckpointFunctionBackward" and all(s.state == "ok" for s in saved):
            return []   # the common case: nothing stale, freed, hooked or checkpointed
        stale = [s for s in saved if s.state == "stale"]
        freed = [s for s in saved if s.state == "freed"]
        self.note_unread(saved)
        lines = self.checkpoint_lines(node, saved)
        if stale or freed:
            return lines + self.stale_or_freed_lines(node, stale, freed)
        return lines

    def checkpoint_lines(self, node, saved):
        """Mark an op of a checkpointed segment (its saved tensors are recomputed in backward)."""
        notes = self.model.notes
        segment = next((s.segment for s in saved if s.state == "checkpointed"), None)
        if segment is not None:
            node.segment = self.segments.setdefault(id(segment), len(self.segments) + 1)
            if CHECKPOINT_NOTE not in notes:
                notes.append(CHECKPOINT_NOTE)
            return [f"checkpointed segment {node.segment}: recomputed in backward"]
        if node.op == "CheckpointFunctionBackward":
            node.segment = 0
            if REENTRANT_NOTE not in notes:
                notes.append(REENTRANT_NOTE)
            return ["checkpointed segment (use_reentrant=True): run again in backward"]
        return []

    def stale_or_freed_lines(self, node, stale, freed):
        if stale:
            node.state = "stale"
            self.model.stale_ops.append(node.op)
            return [f"STALE: saved {s.name} modified in place ({s.detail})" for s in stale]
        if freed:
            node.state = "freed"
            self.model.freed_ops.append(node.op)
            return ["saved tensors freed"]
        return []

    def note_unread(self, saved):
        notes = self.model.notes
        if any(s.state == "hooked" for s in saved) and HOOKED_NOTE not in notes:
            notes.append(HOOKED_NOTE)
        for s in saved:
            if s.state == "unreadable":
                notes.append(f"Saved tensor {s.name} is unreadable: its unpack hook raised {s.detail}. "
                             "The rest of the graph is drawn.")

    def saved_nodes(self, op_id, saved):
        for s in saved:
            if not s.is_tensor:
                continue
            lines = [f"saved {s.name}"]
            if s.tensor is not None:
                lines.append(describe.tensor_text(s.tensor))
                known = self.names.saved_name(s.tensor)
                if known:
                    lines.append("= " + known)
            lines.append({"ok": "", "freed": "freed", "stale": f"STALE ({s.detail})",
                          "hooked": "", "unreadable": "unreadable",
                          "checkpointed": "recomputed in backward (checkpoint)"}[s.state])
            shape = describe.shape_of(s.tensor) if s.tensor is not None else None
            node = self.new_node("saved", "\n".join(line for line in lines if line), name=s.name,
                                 shape=shape, state=s.state)
            self.edge(node.id, op_id, "saved")

    def match_constants(self, fn, op_id, saved, absent=()):
        """Pair each input that has no grad_fn with the saved tensor of its argument (see inputs.py)."""
        for i, found in inputs.constant_inputs(fn, saved, absent).items():
            self.constants[(op_id, i)] = found

    # -- traversal ---------------------------------------------------------
    def run(self):
        op_ids = self.result.op_ids
        while self.queue:
            fn, consumer, input_nr = self.queue.popleft()
            if fn is None and (consumer, input_nr) in self.absent:
                continue   # an optional input given as None: nothing flows there
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
        if fn not in op_ids:
            op_ids[fn] = self.leaf_node(fn.variable).id
            self.model.grad_fns.append("AccumulateGrad")
            self.result.leaf_uses[fn] = [op_ids[fn]]
        return op_ids[fn]

    def split_shared_leaves(self):
        """Draw each use of a leaf as its own labelled copy, for leaves used too often to share."""
        limit = {True: 1, False: None, None: MAX_SHARED_USES}[self.options.split_leaves]
        if limit is None:
            return
        model, result = self.model, self.result
        uses = defaultdict(list)                      # leaf id -> indices of its edges
        leaf_ids = {node_id: fn for fn, node_id in result.op_ids.items() if node_id in result.leaf_uses.get(fn, ())}
        for i, (src, _) in enumerate(model.edges):
            if src in leaf_ids:
                uses[src].append(i)
        split = {leaf: edges for leaf, edges in uses.items() if len(edges) > limit}
        if not split:
            return
        by_id, copies = model.by_id(), {}
        inputs = defaultdict(deque)                   # (leaf id, consumer id) -> input keys, in order
        for key, value in result.input_ids.items():
            if value in split:
                inputs[(value, key[0])].append(key)
        for leaf, edge_indices in split.items():
            original, total = by_id[leaf], len(edge_indices)
            first, _, rest = original.label.partition("\n")
            made = []
            for k, i in enumerate(edge_indices, 1):
                label = f"{first}, use {k} of {total}" + (f"\n{rest}" if rest else "")
                copy = replace(original, label=label, use=(k, total),
                               id=original.id if k == 1 else f"{original.id}_{k}")
                made.append(copy)
                dst = model.edges[i][1]
                model.edges[i] = (copy.id, dst)
                if inputs[(leaf, dst)]:
                    result.input_ids[inputs[(leaf, dst)].popleft()] = copy.id
            copies[leaf] = made
            result.leaf_uses[leaf_ids[leaf]] = [c.id for c in made]
            name = original.name or "a leaf"
            model.notes.append(f"{name} is drawn once per use ({total} copies, each labelled 'use k of "
                               f"{total}'); they are one tensor with one AccumulateGrad. Pass "
                               "split_leaves=False to draw it as one node (graphviz may then be slow).")
        model.nodes = [c for n in model.nodes for c in copies.get(n.id, [n])]

    def finish(self):
        self.split_shared_leaves()
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


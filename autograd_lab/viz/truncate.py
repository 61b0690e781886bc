"""Keep the part of a large graph worth drawing (``max_nodes``) and summarise the rest honestly.

What is kept is what lies nearest the output (or nearest the ``focus=`` nodes the
student asked for), measured in steps along the graph's edges, op by op.  An op's
own inputs that are not ops (a leaf or its per-use copy, a constant, a saved
tensor) are kept right after the op and never before the next op: so a weight used
1000 times costs one copy per kept use, not 1000 copies ahead of every op (the
truncated LSTM of issue 24 was 980 copies of one bias and 20 ops).
"""

from collections import deque

from . import describe
from .model import Node

OUTPUT_SIDE, INPUT_SIDE = "n_more", "n_more_out"
ATTACHED = ("leaf", "constant", "saved")   # kinds with no inputs of their own


def truncate(model, max_nodes, focus=()):
    """Keep ``max_nodes`` nodes nearest the output (or ``focus`` ids); one box stands for the rest."""
    if max_nodes is None or len(model.nodes) <= max_nodes:
        return model
    order = _nearest_first(model, focus)
    kept_ids = set(order[:max_nodes])
    kept = [n for n in model.nodes if n.id in kept_ids]
    hidden = len(model.nodes) - len(kept)
    where = "nearest the nodes you asked for (focus=)" if focus else "nearest the output"
    summary = Node(OUTPUT_SIDE, "summary", None, None,
                   f"+{describe.plural(hidden, 'more node')}\n(max_nodes={max_nodes}; raise it to see them)")
    downstream = Node(INPUT_SIDE, "summary", None, None, "towards the output\n(hidden: see the note)")
    out = model.copy(nodes=kept + [summary])
    out.edges, uses_downstream = [], False
    for src, dst in model.edges:
        if dst in kept_ids:
            out.edges.append((src, dst) if src in kept_ids else (summary.id, dst))
        elif src in kept_ids and focus:   # a kept node whose consumer is hidden (only when focused)
            out.edges.append((src, downstream.id))
            uses_downstream = True
    if uses_downstream:
        out.nodes.append(downstream)
    out.edges = list(dict.fromkeys(out.edges))  # several hidden inputs of one node: one edge
    out.edge_kinds = {e: k for e, k in model.edge_kinds.items() if e in set(out.edges)}
    out.edge_labels = {e: t for e, t in model.edge_labels.items() if e in set(out.edges)}
    out.notes.append(f"Showing {max_nodes} of {len(model.nodes)} nodes, those {where}; "
                     f"{'the other one is' if hidden == 1 else f'the other {hidden} are'} summarised in one box.")
    return out


def _nearest_first(model, focus):
    """Node ids, nearest first: ops by distance, each followed by its own non-op inputs."""
    inputs = model.inputs_of()
    consumers = {n.id: [] for n in model.nodes}
    for src, dst in model.edges:
        consumers[src].append(dst)
    kinds = {n.id: n.kind for n in model.nodes}
    if focus:
        start = list(focus)
        neighbours = lambda node_id: inputs[node_id] + consumers[node_id]   # noqa: E731 - both ways
    else:
        start = [n.id for n in model.nodes if not consumers[n.id]]          # outputs: nothing consumes them
        neighbours = inputs.__getitem__
    seen, order, queue = set(start), [], deque(start)
    while queue:
        node_id = queue.popleft()
        order.append(node_id)
        for i in inputs[node_id]:   # the op's own leaves, constants and saved tensors come with it
            if i not in seen and kinds[i] in ATTACHED:
                seen.add(i)
                order.append(i)
        for nxt in neighbours(node_id):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    order += [n.id for n in model.nodes if n.id not in seen]   # unreachable from the start: last
    return order

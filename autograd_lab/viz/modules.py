"""Group nodes by ``nn.Module`` (graphviz clusters) and collapse modules to a depth.

When the forward ran under ``record_modules(model)`` every op already carries the
module call that made it (see ``recorder``); ``place_leaves`` then puts each
parameter with the ops that use it (a tied weight used in two modules sits in
their common ancestor, where both uses are drawn).  Without the recording, the
autograd graph does not say which module made an op, so ops are guessed from
the parameters they read: a leaf belongs to the module that owns the parameter;
an op whose inputs are only parameters (``TBackward0`` of a weight) goes with them;
any other op goes to the deepest module shared by the parameters it reads
directly.  Ops that read no parameter (activations, the loss) stay outside.
"""

from collections import deque

from .model import Node


def parameter_paths(module):
    """id(parameter) -> module path, e.g. ``("encoder", "0")`` for ``encoder.0.weight``."""
    return {id(p): tuple(name.split(".")[:-1]) for name, p in module.named_parameters()}


def _common_prefix(paths):
    first, *rest = paths
    length = len(first)
    for path in rest:
        length = min(length, len(path))
        while path[:length] != first[:length]:
            length -= 1
    return first[:length]


def _inputs_first(model):
    """Node ids ordered so that every node comes after its inputs (Kahn's algorithm)."""
    inputs = model.inputs_of()
    consumers = {n.id: [] for n in model.nodes}
    waiting = {}
    for node_id, sources in inputs.items():
        waiting[node_id] = len(sources)
        for src in sources:
            consumers[src].append(node_id)
    ready = deque(n.id for n in model.nodes if waiting[n.id] == 0)
    order = []
    while ready:
        node_id = ready.popleft()
        order.append(node_id)
        for consumer in consumers[node_id]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    return order, inputs


def place_leaves(model):
    """A recorded model: each leaf goes to the deepest cluster shared by the ops that use it."""
    out = model.copy()
    nodes = out.by_id()
    consumers = {}
    for src, dst in out.edges:
        consumers.setdefault(src, []).append(nodes[dst].cluster)
    for node in out.nodes:
        if node.kind == "leaf" and node.id in consumers:
            node.cluster = _common_prefix(consumers[node.id])
    return out


def assign_ops(model, module):
    """Place op nodes in module clusters and title every cluster ``path: Type``."""
    out = model.copy()
    nodes = out.by_id()
    order, inputs = _inputs_first(out)
    params_only = set()
    for node_id in order:
        node = nodes[node_id]
        if node.kind != "op":
            continue
        sources = [nodes[s] for s in inputs[node_id]]
        placed = [s.cluster for s in sources
                  if s.cluster and (s.kind == "leaf" or s.id in params_only)]
        if placed:
            node.cluster = _common_prefix(placed)
        if sources and all(s.kind == "leaf" or s.id in params_only for s in sources):
            params_only.add(node_id)
    submodules = dict(module.named_modules())
    for node in out.nodes:
        for depth in range(1, len(node.cluster) + 1):
            path = node.cluster[:depth]
            kind = type(submodules.get(".".join(path))).__name__
            out.cluster_labels.setdefault(path, f"{'.'.join(path)}: {kind}")
    return out


def collapse(model, depth):
    """Replace everything inside each module at ``depth`` by one summary box."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a whole number >= 1 (1 = one box per top-level module); got {depth!r}.")
    boxes, members, kept = {}, {}, []
    for node in model.nodes:
        if len(node.cluster) < depth:
            kept.append(node)
            continue
        path = node.cluster[:depth]
        if path not in boxes:
            title = model.cluster_labels.get(path, ".".join(path))
            boxes[path] = Node(f"m{len(boxes)}", "summary", None, ".".join(path), title, cluster=path[:-1])
            kept.append(boxes[path])
        members.setdefault(path, []).append(node)
    for path, box in boxes.items():
        group = members[path]
        ops = sum(n.kind == "op" for n in group)
        leaves = len({n.name for n in group if n.kind == "leaf"})
        box.label += f"\n{ops} ops, {leaves} parameters (collapsed)"
    moved = {n.id: boxes[n.cluster[:depth]].id for n in model.nodes if len(n.cluster) >= depth}
    out = model.copy(nodes=kept)
    out.edges = []
    for src, dst in model.edges:
        edge = (moved.get(src, src), moved.get(dst, dst))
        if edge[0] != edge[1]:
            out.edges.append(edge)
    out.edges = list(dict.fromkeys(out.edges))
    return out

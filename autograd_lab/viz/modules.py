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


def place_inputs(model, kinds=("leaf", "constant", "saved")):
    """Each input of ``kinds`` goes to the deepest cluster shared by the ops that use it.

    A recorded model places its leaves this way; every model places its constants and
    saved tensors, so a collapsed block takes its attention mask and position ids with it
    (issue 24: 11 constants floated outside each collapsed GPT-2 block).
    """
    out = model.copy()
    nodes = out.by_id()
    consumers = {}
    for src, dst in out.edges:
        consumers.setdefault(src, []).append(nodes[dst].cluster)
    for node in out.nodes:
        if node.kind in kinds and node.id in consumers:
            node.cluster = _common_prefix(consumers[node.id])
    return out


def place_leaves(model):
    """A recorded model: leaves, constants and saved tensors sit with the ops that use them."""
    return place_inputs(model)


def frame_segments(model):
    """Draw each checkpointed segment (``Node.segment``) in its own frame, with its inputs."""
    if not any(n.segment for n in model.nodes):
        return model
    out = model.copy()
    for node in out.nodes:
        if node.segment and not node.cluster:
            path = (f"checkpointed segment {node.segment}",)
            node.cluster = path
            out.cluster_labels[path] = f"checkpointed segment {node.segment} (recomputed in backward)"
    return place_inputs(out, kinds=("constant", "saved"))


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
    """Replace everything inside each module at ``depth`` by one summary box.

    Returns the model unchanged, with a note, when the boxes would form a cycle (ops
    placed by the parameters they read, without ``record_modules``, can interleave).
    """
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
    if not is_acyclic(out):
        kept = model.copy()
        how = ("the recorded module calls interleave" if model.recorded_modules else
               "without record_modules, ops are placed by the parameters they read, which can put an op "
               "between two ops of one module")
        kept.notes.append(f"Not collapsed to depth={depth}: the boxes would form a cycle ({how}). "
                          "Run the forward under `with autograd_lab.viz.record_modules(model):` and draw "
                          "again; each module call is then its own box. The modules are drawn as frames instead.")
        return kept
    return out


def is_acyclic(model):
    """True when the edges form no cycle (Kahn's algorithm reaches every node)."""
    order, _ = _inputs_first(model)
    return len(order) == len(model.nodes)


MAX_CLUSTERS = 60   # graphviz's dot slows down sharply with many clusters (981 took 77 s)


def bound_clusters(model, limit=MAX_CLUSTERS):
    """Merge frames until at most ``limit`` are drawn, and say in a note what was merged.

    Repeated calls of one module (``cell``, ``cell#2``, ...) are merged first, in runs
    of consecutive calls, so an unrolled RNN keeps one frame per stretch of steps;
    if that is not enough, the deepest level of frames is merged into its parent.
    Frames only group nodes: merging them never changes an edge, so never makes a cycle.
    """
    paths = _all_paths(model)
    if len(paths) <= limit:
        return model
    out = model.copy()
    before, merged = len(paths), []
    while len(paths) > limit:
        group = _largest_call_group(paths)
        if group is None:
            deepest = max(len(p) for p in paths)
            rename = {p: p[:deepest - 1] for p in paths if len(p) == deepest}
            merged.append(f"frames at nesting level {deepest} into their parents")
        else:
            rename, text = _merge_calls(out, group, len(group) - (len(paths) - limit))
            merged.append(text)
        for node in out.nodes:
            node.cluster = _renamed(node.cluster, rename)
        paths = _all_paths(out)
    out.notes.append(f"{before} module frames are too many to lay out quickly; drawn as {len(paths)} "
                     f"(at most {limit}): merged {'; '.join(merged)}.")
    return out


def _all_paths(model):
    """Every frame path, in the order the nodes first reach it (so merging is deterministic)."""
    return list(dict.fromkeys(n.cluster[:d] for n in model.nodes for d in range(1, len(n.cluster) + 1)))


def _base(part):
    return part.split("#")[0]


def _call_number(part):
    return int(part.split("#")[1]) if "#" in part else 1


def _largest_call_group(paths):
    """The biggest set (at least 2) of sibling frames that are calls of one module."""
    groups = {}
    for path in paths:
        groups.setdefault((path[:-1], _base(path[-1])), []).append(path)
    best = max(groups.values(), key=len, default=[])
    return sorted(best, key=lambda p: _call_number(p[-1])) if len(best) > 1 else None


def _merge_calls(model, group, bins):
    """Merge ``group`` (calls of one module, in call order) into ``bins`` runs of consecutive calls."""
    bins = max(1, bins)
    size = -(-len(group) // bins)
    rename = {}
    for start in range(0, len(group), size):
        run = group[start:start + size]
        first, last = _call_number(run[0][-1]), _call_number(run[-1][-1])
        target = run[0][:-1] + (f"{_base(run[0][-1])}#{first}-{last}",)
        title = model.cluster_labels.get(run[0], ".".join(run[0])).split(" (call")[0]
        model.cluster_labels[target] = f"{title} (calls {first}-{last})"
        rename.update({path: target for path in run})
    parent = ".".join(group[0][:-1] + (_base(group[0][-1]),))
    return rename, f"{len(group)} calls of {parent} into runs of {size} consecutive calls"


def _renamed(cluster, rename):
    for depth in range(len(cluster), 0, -1):
        if cluster[:depth] in rename:
            return rename[cluster[:depth]] + cluster[depth:]
    return cluster

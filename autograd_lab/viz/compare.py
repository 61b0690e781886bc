"""The difference of two drawn graphs, for "with vs without detach()" lessons.

The two graphs are drawn side by side, each in its own frame, with every node
that has no counterpart in the other graph highlighted.  Drawing them apart
(rather than merging matched nodes into one picture) never invents an edge that
neither graph has.

Nodes are matched by what they are (kind, op, name, shape), never by id or value;
the k-th such node of one graph matches the k-th of the other.  A leaf drawn once
per use is one leaf: it is matched and reported once.  Matching is linear in the
size of the graphs.
"""

from dataclasses import replace

from .describe import plural

SIDES = (("a", "first graph", "only_a"), ("b", "second graph", "only_b"))


def _occurrences(nodes):
    """node id -> (signature, k) where k counts earlier nodes with the same signature."""
    seen, keys, first_use = {}, {}, {}
    for node in nodes:
        sig = node.signature()
        if node.use is not None and node.use[0] > 1:   # a later copy of a split leaf
            keys[node.id] = first_use[sig]
            continue
        if node.use is not None:
            first_use[sig] = (sig, seen.get(sig, 0))
        keys[node.id] = (sig, seen.get(sig, 0))
        seen[sig] = seen.get(sig, 0) + 1
    return keys


def _first_use(node):
    return node.use is None or node.use[0] == 1


def _one_line(label):
    return " ".join(label.split())


def _framed(model, prefix, title, unmatched, mark):
    """Copies of ``model``'s nodes and edges, renamed with ``prefix`` and nested in a frame."""
    frame = (title,)
    nodes = [replace(n, id=f"{prefix}_{n.id}", cluster=frame + n.cluster,
                     mark=mark if n.id in unmatched else n.mark) for n in model.nodes]
    rename = {n.id: f"{prefix}_{n.id}" for n in model.nodes}
    edges = [(rename[s], rename[d]) for s, d in model.edges]
    edge_kinds = {(rename[s], rename[d]): k for (s, d), k in model.edge_kinds.items()}
    edge_labels = {(rename[s], rename[d]): t for (s, d), t in model.edge_labels.items()}
    clusters = {frame + path: label for path, label in model.cluster_labels.items()}
    clusters[frame] = title
    return nodes, edges, edge_kinds, edge_labels, clusters


def diff_models(a, b):
    """(model, labels only in a, labels only in b): both graphs side by side, differences marked."""
    keys_a, keys_b = _occurrences(a.nodes), _occurrences(b.nodes)
    in_a, in_b = set(keys_a.values()), set(keys_b.values())
    unmatched_a = {n for n, key in keys_a.items() if key not in in_b}
    unmatched_b = {n for n, key in keys_b.items() if key not in in_a}
    out = a.copy(nodes=[])
    out.edges, out.edge_kinds, out.edge_labels, out.cluster_labels = [], {}, {}, {}
    for model, unmatched, (prefix, title, mark) in ((a, unmatched_a, SIDES[0]), (b, unmatched_b, SIDES[1])):
        nodes, edges, kinds, labels, clusters = _framed(model, prefix, title, unmatched, mark)
        out.nodes += nodes
        out.edges += edges
        out.edge_kinds.update(kinds)
        out.edge_labels.update(labels)
        out.cluster_labels.update(clusters)
    out.stale_ops = a.stale_ops + b.stale_ops
    out.freed_ops = a.freed_ops + b.freed_ops
    only_a = [_one_line(n.label) for n in a.nodes if n.id in unmatched_a and _first_use(n)]
    only_b = [_one_line(n.label) for n in b.nodes if n.id in unmatched_b and _first_use(n)]
    out.notes = [f"Only in the first graph: {plural(len(only_a), 'node')}; "
                 f"only in the second: {plural(len(only_b), 'node')}."]
    return out, only_a, only_b

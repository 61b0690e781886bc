"""The difference of two drawn graphs, for "with vs without detach()" lessons.

Nodes are matched by what they are (kind, op, name, shape), never by id or value;
the k-th such node of one graph matches the k-th of the other.
"""

from dataclasses import replace


def _occurrences(nodes):
    """node id -> (signature, k) where k counts earlier nodes with the same signature."""
    seen, keys = {}, {}
    for node in nodes:
        sig = node.signature()
        keys[node.id] = (sig, seen.get(sig, 0))
        seen[sig] = seen.get(sig, 0) + 1
    return keys


def diff_models(a, b):
    """(model, labels only in a, labels only in b): a's graph plus b's extras, both highlighted."""
    keys_a, keys_b = _occurrences(a.nodes), _occurrences(b.nodes)
    id_in_a = {key: node_id for node_id, key in keys_a.items()}
    in_b = set(keys_b.values())
    out = a.copy()
    for node in out.nodes:
        if keys_a[node.id] not in in_b:
            node.mark = "only_a"
    b_to_out = {}
    for node in b.nodes:
        match = id_in_a.get(keys_b[node.id])
        if match is None:
            extra = replace(node, id="b_" + node.id, mark="only_b")
            out.nodes.append(extra)
            match = extra.id
        b_to_out[node.id] = match
    out.edges = list(dict.fromkeys(out.edges + [(b_to_out[s], b_to_out[d]) for s, d in b.edges]))
    only_a = [n.label for n in out.nodes if n.mark == "only_a"]
    only_b = [n.label for n in out.nodes if n.mark == "only_b"]
    out.notes = [f"Only in the first graph: {len(only_a)} nodes; only in the second: {len(only_b)}."]
    return out, only_a, only_b

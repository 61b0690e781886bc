"""Plain-text rendering: an indented tree from each root down to the leaves.

A node reached a second time (a shared subgraph) is printed once and then
referred to by id, so the text stays linear in the size of the graph.
"""


def one_line(node):
    text = " | ".join(node.label.split("\n"))
    if node.step is not None:
        text = f"#{node.step} {text}"
    if node.mark:
        text += f"  <{node.mark}>"
    return f"[{node.id}] {text}"


def to_text(model):
    inputs = model.inputs_of()
    consumed = {src for src, _ in model.edges}
    roots = [n.id for n in model.nodes if n.id not in consumed]
    nodes = model.by_id()
    lines, shown = [], set()
    # Each entry: node id, its consumer, the prefix of its own line, the prefix its children build on.
    stack = [(root, None, "", "") for root in reversed(roots)]
    while stack:
        node_id, consumer, line_prefix, child_prefix = stack.pop()
        flow = model.edge_labels.get((node_id, consumer))
        suffix = f"  <- grad {flow}" if flow else ""
        if node_id in shown:
            lines.append(f"{line_prefix}[{node_id}] (shown above){suffix}")
            continue
        shown.add(node_id)
        lines.append(line_prefix + one_line(nodes[node_id]) + suffix)
        children = inputs.get(node_id, [])
        for i in reversed(range(len(children))):
            last = i == len(children) - 1
            stack.append((children[i], node_id, child_prefix + ("└─ " if last else "├─ "),
                          child_prefix + ("   " if last else "│  ")))
    lines += model.notes
    return "\n".join(lines)

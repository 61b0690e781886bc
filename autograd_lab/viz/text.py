"""Plain-text rendering: an indented tree from each root down to the leaves.

A node reached a second time (a shared subgraph) is printed once and then
referred to by id.  Indentation stops at ``MAX_DEPTH`` levels: deeper inputs are
printed further down under a "continued" heading with the indentation reset, so
no line is longer than a label plus ``3 * MAX_DEPTH`` characters and the text stays
linear in the size of the graph (a 100-step RNN's tree was 577 KiB when every
level indented further).
"""

MAX_DEPTH = 16


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
    nodes = model.by_id()
    lines, shown, deferred = [], set(), []
    pending = [(None, [n.id for n in model.nodes if n.id not in consumed])]
    while pending:
        heading, starts = pending.pop(0)
        if heading:
            lines.append(f"[{heading}] inputs, continued:")
        # Each entry: node id, its consumer, depth, the prefix of its own line, the prefix its children build on.
        stack = [(node_id, heading, 1 if heading else 0, "", "") for node_id in reversed(starts)]
        while stack:
            node_id, consumer, depth, line_prefix, child_prefix = stack.pop()
            flow = model.edge_labels.get((node_id, consumer))
            suffix = f"  <- grad {flow}" if flow else ""
            if node_id in shown:
                lines.append(f"{line_prefix}[{node_id}] (shown above){suffix}")
                continue
            shown.add(node_id)
            children = inputs.get(node_id, [])
            if children and depth >= MAX_DEPTH:
                lines.append(line_prefix + one_line(nodes[node_id]) + suffix + "  (inputs continued below)")
                deferred.append(node_id)
                continue
            lines.append(line_prefix + one_line(nodes[node_id]) + suffix)
            for i in reversed(range(len(children))):
                last = i == len(children) - 1
                stack.append((children[i], node_id, depth + 1, child_prefix + ("└─ " if last else "├─ "),
                              child_prefix + ("   " if last else "│  ")))
        while deferred:
            node_id = deferred.pop(0)
            pending.append((node_id, inputs[node_id]))
    lines += model.notes
    return "\n".join(lines)

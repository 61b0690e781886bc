"""DOT source for a ``Model``: colour-blind-safe styling, clusters, legend.

Colours come from the Okabe-Ito palette.  States and marks pair their colour with a
line style or width, and saved tensors and summaries have shapes of their own; the
kinds drawn as plain boxes (op, leaf, output) differ by fill and by their text (an
op's grad_fn class, a leaf's requires_grad line), so the picture still reads in grey
scale.  The background is
transparent, so the picture sits on JupyterLab's light or dark theme: every node
is filled (dark text on a light fill reads on both), and what is drawn on the
background itself (edges, cluster frames, titles) is a mid grey that contrasts
with white and with near-black.
"""

from functools import lru_cache

# Okabe & Ito (2008), "Color Universal Design".
ORANGE, SKY_BLUE, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")

# Op boxes are plain, not rounded: graphviz draws a rounded box as a path of 25 points
# (a plain one is 5), and printing those numbers was a third of the SVG rendering time
# on GPT-2 and BERT-tiny (3.5 to 4 ms of about 10, issue 24's benchmark).  An op is told
# from a leaf by its light grey fill (blue for a leaf, darker in grey scale too) and its
# text (the grad_fn's class name, XxxBackward0).
KIND_STYLE = {
    "op": {"shape": "box", "style": "filled", "fillcolor": "#EEEEEE"},
    "leaf": {"shape": "box", "style": "filled", "fillcolor": SKY_BLUE},
    "tensor": {"shape": "box", "style": "filled", "fillcolor": YELLOW},
    "constant": {"shape": "box", "style": "dashed,filled", "color": "#777777", "fillcolor": "#F4F4F4",
                 "fontcolor": "#444444"},
    "saved": {"shape": "note", "style": "filled", "fillcolor": ORANGE},
    "summary": {"shape": "folder", "style": "filled", "fillcolor": "#FFFFFF"},
}
STATE_STYLE = {
    "stale": {"color": VERMILLION, "penwidth": "3"},
    "freed": {"style": "dashed,filled", "fillcolor": "#D9D9D9", "fontcolor": "#333333"},
    "split": {"peripheries": "2"},
}
MARK_STYLE = {
    "current": {"style": "filled,bold", "fillcolor": PURPLE, "fontcolor": "#000000",
                "penwidth": "3"},
    "only_a": {"color": VERMILLION, "penwidth": "3", "style": "filled,bold", "fillcolor": "#F6C9A8"},
    "only_b": {"color": BLUE, "penwidth": "3", "style": "filled,bold", "fillcolor": "#B9D9F0"},
}
STEP_STYLE = {"color": BLUE, "penwidth": "2"}

# (kind, feature, text): feature is a state, a mark or "step"; None for the plain kind.
LEGEND = [
    ("op", None, "op node (grad_fn)\nname, output shape"),
    ("leaf", None, "leaf that requires grad\n.grad after backward"),
    ("tensor", None, "output tensor (a root)"),
    ("constant", None, "tensor that needs no grad\n(constant, detached)"),
    ("saved", None, "tensor saved for backward"),
    ("summary", None, "nodes left out (max_nodes)\nor a collapsed module"),
    ("leaf", "split", "one leaf drawn once per use\n(use k of n): one tensor,\none AccumulateGrad"),
    ("op", "stale", "STALE: saved tensor modified\nin place; backward will fail"),
    ("op", "freed", "saved tensors freed by a\nbackward without retain_graph"),
    ("op", "step", "executed by backward\n#k = execution order"),
    ("op", "current", "step being executed"),
    ("op", "only_a", "only in the first graph"),
    ("op", "only_b", "only in the second graph"),
]

def quote(text):
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def attrs(mapping):
    return " ".join(f"{key}={quote(value)}" for key, value in mapping.items())


# Every node starts as an op box (the node defaults), and a node line names only what
# differs from it: most nodes are ops, and each attribute a line names costs graphviz
# time to read (parsing the 2-layer GPT-2's DOT text: 2.2 -> 1.8 ms).
OP_STYLE = KIND_STYLE["op"]

GREY = "#8C8C8C"   # on the background: 3.4:1 against white, 6:1 against JupyterLab's dark #111111
# nslimit=1 caps the network-simplex passes that place nodes sideways at one per node:
# 25% less layout time on a 2-layer GPT-2 and 40% less on a 12-layer one (issue 24's
# benchmark), edges a little less straight; ranks and crossings are computed as before.
# splines=polyline routes edges around nodes in straight segments: 25% less layout time
# again on the 2-layer GPT-2 (measured with libgvc, graphviz 2.43).  mclimit=0.3 stops the
# crossing reduction sooner: the same number of crossings as the default on resnet18,
# GPT-2 (2 and 12 layers), BERT-tiny, an RNN (T=20) and an LSTM (T=50) (dot -v), about
# 10% less layout time on the 2-layer GPT-2.
# Text is graphviz's default black, not "#000000": the same colour, but a colour given in hex
# is parsed (sscanf) and printed again for every line of text in the SVG, 0.2 to 0.3 ms of
# rendering on GPT-2 and BERT-tiny.
# Labels are monospace (Courier): every monospace font advances about 0.6 em per
# character (Courier, DejaVu Sans Mono, Liberation Mono, Menlo), so the box graphviz
# sizes fits the text in whatever font the reader's browser picks.  "Helvetica" became
# DejaVu Sans on Linux, 10 to 15% wider than the Helvetica metrics boxes were sized with.
GRAPH_ATTRS = (f'  graph [fontname="Courier" fontsize=10 ranksep=0.3 nodesep=0.25 bgcolor="transparent" '
               f'fontcolor="{GREY}" nslimit=1 mclimit=0.3 splines=polyline]\n'
               f'  node [{attrs(OP_STYLE)} fontname="Courier" fontsize=10 height=0.3 margin="0.08,0.04"]\n'
               f'  edge [fontname="Courier" fontsize=9 arrowsize=0.6 color="{GREY}" fontcolor="{GREY}"]\n')

# newrank=true ranks the whole graph in one pass: 10 to 15% less layout time on GPT-2 and
# BERT-tiny (issue 24's benchmark, libgvc, graphviz 2.43), the same picture on resnet18 and
# BERT-tiny, a narrower one on the 2-layer GPT-2 (1572 -> 1212 pt).  Not with frames: there
# it ranks a frame's inputs with the rest of the graph and undoes the frames' layout
# (resnet18 in module frames: 13334 x 3381 pt instead of 3300 x 3800).
NEWRANK = "  newrank=true\n"


@lru_cache(maxsize=None)
def style_text(kind, state=None, mark=None, step=False):
    """The attribute text of one combination of styles, less what the node defaults already say
    (a graph uses a handful: made once)."""
    style = node_style(kind, state, mark, 1 if step else None)
    return attrs({key: value for key, value in style.items() if OP_STYLE.get(key) != value})


def node_style(kind, state=None, mark=None, step=None):
    style = dict(KIND_STYLE[kind])
    style.update(STATE_STYLE.get(state, {}))
    if step is not None:
        style.update(STEP_STYLE)
    style.update(MARK_STYLE.get(mark, {}))
    if state == "freed" and mark == "current":
        style["style"] += ",dashed"   # the step being run still shows that its buffers are gone
    return style


def node_line(node, indent="  ", placed=None):
    state = "split" if node.use is not None and node.state == "ok" else node.state
    label = node.label if node.step is None else f"#{node.step} {node.label}"
    style = style_text(node.kind, state, node.mark, node.step is not None)
    return f"{indent}{node.id} [label={quote(label)}{' ' if style else ''}{style}{_at(placed, node.id)}]\n"


def _at(placed, name):
    """Position attributes of a node laid out before (``layout.positions``), for ``nop2``."""
    if not placed or name not in placed["nodes"]:
        return ""
    pos, width, height = placed["nodes"][name]
    return f' pos="{pos}" width={width} height={height} fixedsize=true'


def edge_line(src, dst, kind, label, placed=None, free=False):
    style = {}
    if kind == "saved":
        style = {"style": "dashed", "color": ORANGE, "arrowhead": "none"}
    if free:
        style["constraint"] = "false"
    if label:
        style["label"] = label
    if placed:
        pos, label_pos = placed.pop(0)
        style["pos"] = pos
        if label and label_pos:
            style["lp"] = label_pos
    return f"  {src} -> {dst}" + (f" [{attrs(style)}]" if style else "") + "\n"


def to_dot(model, legend=False, title=None, placed=None):
    """DOT text of ``model``; with ``placed`` (a layout made before), positions that ``nop2`` keeps."""
    parts = ["digraph autograd {\n", GRAPH_ATTRS]
    framed = legend or any(n.cluster for n in model.nodes)
    if not framed:
        parts.append(NEWRANK)
    if title:
        parts.append(f"  label={quote(title)} labelloc=t\n")
    if placed:
        parts.append(f'  bb="{placed["bb"]}"' + (f' lp="{placed["lp"]}"' if placed.get("lp") else "") + "\n")
    parts += _clustered_nodes(model, placed)
    edges = {key: list(value) for key, value in placed["edges"].items()} if placed else {}
    # In frames, an input's edge does not set its rank: graphviz then keeps the parameters in
    # a row at the top of their block instead of stretching the block up beside the one
    # before (resnet18 with module frames was a mostly empty staircase, 5829 x 4000 pt;
    # with this, 2203 x 3808).
    sources = {n.id for n in model.nodes if n.kind in ("leaf", "constant")} if any(
        n.cluster for n in model.nodes) else set()
    for src, dst in model.edges:
        parts.append(edge_line(src, dst, model.edge_kinds.get((src, dst)), model.edge_labels.get((src, dst)),
                               edges.get((src, dst)), free=src in sources))
    if legend:
        parts += legend_lines(model, placed)
    parts.append("}\n")
    return "".join(parts)


def _clustered_nodes(model, placed=None):
    """Nodes, with those that share a cluster path nested in ``subgraph cluster_*`` blocks."""
    tree = {}   # path prefix -> child prefixes, in first-seen order
    members = {}
    loose = []
    for node in model.nodes:
        if not node.cluster:
            loose.append(node_line(node, placed=placed))
            continue
        members.setdefault(node.cluster, []).append(node)
        for depth in range(1, len(node.cluster) + 1):
            parent, child = node.cluster[:depth - 1], node.cluster[:depth]
            tree.setdefault(parent, {})[child] = None
    lines = list(loose)
    stack = [(path, 1) for path in reversed(list(tree.get((), {})))]
    counter = 0
    # Entries (path, depth) open a cluster; (None, depth) closes the one opened at that depth,
    # after its children, which are pushed later and so popped first.
    while stack:
        path, depth = stack.pop()
        if path is None:
            lines.append("  " * depth + "}\n")
            continue
        counter += 1
        pad = "  " * depth
        title = model.cluster_labels.get(path, path[-1])
        bb = placed["clusters"].get(f"cluster_{counter}") if placed else None
        lines.append(f"{pad}subgraph cluster_{counter} {{\n{pad}  label={quote(title)} "
                     f'style="rounded,dashed" color="{GREY}" fontcolor="{GREY}"'
                     + (f' bb="{bb}"' if bb else "") + "\n")
        lines += [node_line(n, pad + "  ", placed) for n in members.get(path, [])]
        stack.append((None, depth))
        stack += [(child, depth + 1) for child in reversed(list(tree.get(path, {})))]
    return lines


def legend_lines(model, placed=None):
    """A legend cluster with one sample per style the picture actually uses."""
    present = {n.kind for n in model.nodes} | {n.state for n in model.nodes} | {n.mark for n in model.nodes}
    if any(n.use is not None for n in model.nodes):
        present.add("split")
    if any(n.step is not None for n in model.nodes):
        present.add("step")
    bb = placed["clusters"].get("cluster_legend") if placed else None
    lines = [f'  subgraph cluster_legend {{\n    label="legend" style="rounded" color="{GREY}"'
             + (f' bb="{bb}"' if bb else "") + "\n"]
    previous = None
    for i, (kind, feature, text) in enumerate(LEGEND):
        if (feature or kind) not in present:
            continue
        style = node_style(kind, state=feature, mark=feature, step=1 if feature == "step" else None)
        lines.append(f"    legend_{i} [label={quote(text)} {attrs(style)}{_at(placed, f'legend_{i}')}]\n")
        if previous:  # invisible edges stack the samples in one column
            lines.append(f"    {previous} -> legend_{i} [style=invis]\n")
        previous = f"legend_{i}"
    lines.append("  }\n")
    return lines

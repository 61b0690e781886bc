"""Tests for autograd_lab.viz: counts on a bank of graphs, cross-checked by an
independent walk of next_functions; determinism; scale; fallbacks; bad input."""

import re
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograd_lab import diff, draw, trace_backward
from autograd_lab.viz import layout
from autograd_lab.viz.walk import MAX_SHARED_USES
from autograd_lab.viz import Graph, LayoutError


# -- an independent walk of the autograd graph, to check the drawing against --------
def independent_walk(*roots):
    """Counts straight from grad_fn.next_functions (sets, no shared code with viz)."""
    seen, pending = set(), [r.grad_fn for r in roots if r.grad_fn is not None]
    fns = []
    while pending:
        fn = pending.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        fns.append(fn)
        pending.extend(next_fn for next_fn, _ in fn.next_functions)
    entries = [next_fn for fn in fns for next_fn, _ in fn.next_functions]
    uses = Counter(e for e in entries if type(e).__name__ == "AccumulateGrad")
    return {
        "grad_fns": Counter(type(fn).__name__ for fn in fns),
        "ops": sum(type(fn).__name__ != "AccumulateGrad" for fn in fns),
        "leaf_uses": sum(uses.values()),
        # one node per leaf; one per use only past the split threshold
        "leaf_nodes": sum(n if n > MAX_SHARED_USES else 1 for n in uses.values()),
        "constants": sum(e is None for e in entries),
        "edges": len(entries) + sum(r.grad_fn is not None for r in roots),
    }


def kinds(graph):
    return Counter(node.kind for node in graph.nodes)


def assert_matches_walk(graph, *roots):
    expected = independent_walk(*roots)
    counts = kinds(graph)
    assert Counter(graph.ops()) == expected["grad_fns"]
    assert counts["op"] == expected["ops"]
    assert counts["leaf"] == expected["leaf_nodes"]
    assert counts["constant"] == expected["constants"]
    assert counts["tensor"] == len(roots)
    assert len(graph.edges) == expected["edges"]
    ids = [node.id for node in graph.nodes]
    assert len(set(ids)) == len(ids)
    assert all(src in ids and dst in ids for src, dst in graph.edges)


def rnn_loss(steps, hidden=8):
    torch.manual_seed(0)
    Wx = torch.randn(4, hidden, requires_grad=True)
    Wh = torch.randn(hidden, hidden, requires_grad=True)
    b = torch.zeros(hidden, requires_grad=True)
    h = torch.zeros(1, hidden)
    for _ in range(steps):
        h = torch.tanh(torch.randn(1, 4) @ Wx + h @ Wh + b)
    return h.sum()


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad


# -- the bank of graphs ----------------------------------------------------------
def test_tiny_graph_exact_counts_and_names():
    x = torch.tensor([1.0, 2.0, 3.0])
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    b = torch.tensor(0.1, requires_grad=True)
    loss = (x * w).sum() + b
    g = draw(loss)
    assert g.ops() == ["AddBackward0", "SumBackward0", "AccumulateGrad", "MulBackward0", "AccumulateGrad"]
    assert kinds(g) == Counter(tensor=1, op=3, leaf=2, constant=1)
    assert len(g.edges) == 6
    names = {node.kind: [] for node in g.nodes}
    for node in g.nodes:
        names[node.kind].append(node.name)
    assert sorted(names["leaf"]) == ["b", "w"]          # found in this function's locals
    assert names["constant"] == ["x"]                   # paired with MulBackward0's saved self
    assert names["tensor"] == ["loss"]
    assert [n.op for n in g.nodes if n.kind == "op"] == ["AddBackward0", "SumBackward0", "MulBackward0"]
    assert all(n.op is None for n in g.nodes if n.kind != "op")
    assert_matches_walk(g, loss)


def test_mlp_counts_and_params():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    loss = F.cross_entropy(model(torch.randn(5, 4)), torch.tensor([0, 1, 0, 1, 1]))
    g = draw(loss, params=model.named_parameters())
    assert_matches_walk(g, loss)
    leaves = sorted(n.name for n in g.nodes if n.kind == "leaf")
    assert leaves == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_conv_net_counts():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3))
    loss = net(torch.randn(2, 1, 8, 8)).square().mean()
    g = draw(loss, params=dict(net.named_parameters()))
    assert_matches_walk(g, loss)
    assert "ConvolutionBackward0" in g.ops()


def test_shared_weight_is_one_node_with_one_edge_per_use():
    w = torch.randn(3, requires_grad=True)
    loss = (w * w).sum() + (w * 2).sum()
    g = draw(loss)
    assert_matches_walk(g, loss)
    [leaf] = [n for n in g.nodes if n.kind == "leaf"]
    assert leaf.name == "w" and leaf.use is None
    assert sum(src == leaf.id for src, _ in g.edges) == 3    # three uses, one AccumulateGrad
    assert g.ops().count("AccumulateGrad") == 1
    split = draw(loss, split_leaves=True)
    assert [n.label.split("\n")[0] for n in split.nodes if n.kind == "leaf"] == [
        "w (3,), use 1 of 3", "w (3,), use 2 of 3", "w (3,), use 3 of 3"]
    assert any("one tensor with one AccumulateGrad" in note for note in split.notes)


def test_rnn_counts():
    loss = rnn_loss(20)
    g = draw(loss, max_nodes=None)
    assert_matches_walk(g, loss)
    assert g.ops().count("TanhBackward0") == 20


def test_two_losses_sharing_a_trunk():
    w = torch.randn(3, requires_grad=True)
    trunk = (w * 3).exp()
    loss1, loss2 = trunk.sum(), trunk.mean()
    g = draw(loss1, loss2)
    assert_matches_walk(g, loss1, loss2)
    assert g.ops().count("ExpBackward0") == 1            # the trunk is drawn once
    assert [n.name for n in g.nodes if n.kind == "tensor"] == ["loss1", "loss2"]


def test_roots_as_tuple_list_and_dict():
    w = torch.randn(3, requires_grad=True)
    a, b = (w * 2).sum(), (w + 1).sum()
    as_args = draw(a, b).source
    assert draw((a, b)).source == as_args
    assert draw([a, b]).source == as_args
    named = draw({"first": a, "second": b})
    assert [n.name for n in named.nodes if n.kind == "tensor"] == ["first", "second"]


def test_custom_function():
    x = torch.randn(3, requires_grad=True)
    y = Cube.apply(x * 2).sum()
    g = draw(y, show_saved=True)
    assert_matches_walk_ignoring_saved(g, y)
    assert "CubeBackward" in g.ops()
    saved = [n for n in g.nodes if n.kind == "saved"]
    assert any(n.name == "saved_tensors[0]" for n in saved)


def assert_matches_walk_ignoring_saved(graph, *roots):
    kept = [n for n in graph.nodes if n.kind != "saved"]
    saved_ids = {n.id for n in graph.nodes if n.kind == "saved"}
    stripped = graph._with_model(graph._model.copy(nodes=kept))
    stripped._model.edges = [e for e in graph.edges if e[0] not in saved_ids]
    assert_matches_walk(stripped, *roots)


def test_double_backward_nodes_are_grouped_by_parent():
    a = torch.randn(3, requires_grad=True)
    loss = (a ** 3).sum()
    trace_backward(loss, create_graph=True)
    g = draw(a.grad)
    assert_matches_walk(g, a.grad)
    clusters = {n.cluster for n in g.nodes if n.cluster}
    assert any("made by the backward of PowBackward0" in c[0] for c in clusters)
    assert "subgraph cluster_" in g.source


def test_detach_in_the_middle_and_diff():
    w = torch.randn(3, requires_grad=True)
    h = w * 2
    with_grad = draw((h * w).sum())
    without = draw((h.detach() * w).sum())
    assert with_grad.ops().count("AccumulateGrad") == 1
    assert "MulBackward0" in without.ops()
    assert kinds(without)["constant"] == 1                 # the detached tensor needs no grad
    d = diff(with_grad, without)
    assert d.only_in_a and d.only_in_b
    assert any(label.startswith("MulBackward0") for label in d.only_in_a)
    assert any("no grad" in label for label in d.only_in_b)
    assert 'fillcolor="#F6C9A8"' in d.source and 'fillcolor="#B9D9F0"' in d.source


def test_diff_ignores_the_names_of_outputs():
    w = torch.randn(2, requires_grad=True)
    loss_a = (w * 2).relu().sum()
    loss_b = (w * 2).pow(2).sum()
    d = diff(draw(loss_a), draw(loss_b))
    assert [label.split()[0] for label in d.only_in_a] == ["ReluBackward0"]
    assert [label.split()[0] for label in d.only_in_b] == ["PowBackward0"]
    assert all("\n" not in label for label in d.only_in_a + d.only_in_b)
    same = diff(draw(loss_a), draw(loss_a))
    assert same.only_in_a == [] and same.only_in_b == []


def test_diff_draws_both_graphs_apart_and_invents_no_edge():
    # A branch on a tensor value gives two graphs that share most of their nodes;
    # merging them by label once connected nodes that no graph connects.
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    first, second = draw((w * x).relu().sum()), draw((w * x * 2).sum())
    d = diff(first, second)
    assert len(d.nodes) == len(first.nodes) + len(second.nodes)
    frames = {n.cluster[0] for n in d.nodes}
    assert frames == {"first graph", "second graph"}
    for prefix, graph in (("a_", first), ("b_", second)):
        own = {(s[len(prefix):], t[len(prefix):]) for s, t in d.edges if s.startswith(prefix)}
        assert own == set(graph.edges)
    assert all(s[:2] == t[:2] for s, t in d.edges)  # no edge crosses between the two graphs


def test_in_place_after_save_is_flagged_stale_before_backward():
    x = torch.randn(3, requires_grad=True)
    y = x.sigmoid()
    y.mul_(2)
    g = draw(y.sum())
    assert g.stale() == ["SigmoidBackward0"]
    stale = [n for n in g.nodes if n.op == "SigmoidBackward0"][0]
    assert "STALE: saved result modified in place (v0 -> v1)" in stale.label
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()                                   # the drawing told the truth


def test_freed_after_backward_without_retain_graph():
    x = torch.randn(3, requires_grad=True)
    y = (x * x).sum()
    before = draw(y, show_saved=True)
    y.backward()
    after = draw(y, show_saved=True)
    assert before.freed() == [] and after.freed() == ["MulBackward0"]
    assert [n.state for n in after.nodes if n.kind == "saved"] == ["freed", "freed"]
    x_leaf = [n for n in after.nodes if n.kind == "leaf"][0]
    assert "grad: [" in x_leaf.label                          # small gradients shown by value


def test_saved_tensors_attrs_and_retain_grad():
    w = torch.randn(4, 3, requires_grad=True)
    h = w @ torch.randn(3, 2)
    h.retain_grad()
    loss = h.pow(2).sum()
    loss.backward(retain_graph=True)
    g = draw(loss, show_saved=True, show_attrs=True)
    op_h = [n for n in g.nodes if n.name == "h"][0]
    assert "grad: (4, 2) norm" in op_h.label
    saved = [n.label for n in g.nodes if n.kind == "saved"]
    assert any("(4, 2) float32" in label for label in saved)
    pow_node = [n for n in g.nodes if n.op == "PowBackward0"][0]
    assert "exponent=2" in pow_node.label


def test_view_root_is_labelled():
    w = torch.randn(4, requires_grad=True)
    y = w * 2
    v = y[:2]
    g = draw(v)
    assert "view of y" in g.nodes[0].label


def test_strip_suffix_and_tensor_view():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    loss = (w * x).sum()
    g = draw(loss, strip_suffix=True)
    assert [n.label.split("\n")[0] for n in g.nodes if n.kind == "op"] == ["Sum", "Mul"]
    assert g.ops() == ["SumBackward0", "MulBackward0", "AccumulateGrad"]   # real names stay
    t = draw(loss, view="tensor")
    assert [n.label for n in t.nodes if n.kind == "op"] == ["sum", "*"]
    w_node = [n for n in t.nodes if n.name == "w"][0]
    assert "data [1, 2]" in w_node.label
    # tensor, op, tensor alternate along every edge into and out of an op
    by_id = {n.id: n for n in t.nodes}
    for src, dst in t.edges:
        assert (by_id[src].kind == "op") != (by_id[dst].kind == "op")


def test_group_modules_and_collapse():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2), nn.Tanh()))
    loss = model(torch.randn(5, 4)).sum()
    g = draw(loss, group_modules=model)
    addmm_clusters = [n.cluster for n in g.nodes if n.op == "AddmmBackward0"]
    assert addmm_clusters == [("2", "0"), ("0",)]
    assert 'label="2.0: Linear"' in g.source and 'label="2: Sequential"' in g.source
    collapsed = draw(loss, group_modules=model, depth=1)
    boxes = [n for n in collapsed.nodes if n.kind == "summary"]
    assert [b.name for b in boxes] == ["2", "0"]
    assert "2 ops, 2 parameters (collapsed)" in boxes[0].label
    assert not any(n.kind == "leaf" for n in collapsed.nodes)
    with pytest.raises(ValueError, match="depth must be"):
        draw(loss, group_modules=model, depth=0)


# -- trace_backward ----------------------------------------------------------------
def test_trace_backward_order_accumulations_and_edge_grads():
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    a = torch.tensor([0.5, 0.5, 0.5])
    b = torch.tensor([2.0, 0.0, -1.0])
    loss = (w * a).sum() + (w * b).sum()
    t = trace_backward(loss)
    assert t.order[0] == "AddBackward0" and t.order[-1] == "AccumulateGrad"
    assert t.order.count("AccumulateGrad") == 1
    assert [name for name, _ in t.accumulations] == ["w"]
    into_w = [g for _, target, g in t.edge_grads if target == "AccumulateGrad"]
    assert len(into_w) == 2
    torch.testing.assert_close(into_w[0] + into_w[1], w.grad)
    assert len(t.frames) == len(t.order)
    steps = sorted(n.step for n in t.graph.nodes if n.step is not None)
    assert steps[0] == 1 and steps[-1] == len(t.order)
    first = t.frames[0]
    assert [n.op for n in first.nodes if n.mark == "current"] == ["AddBackward0"]
    leaf_before = [n for n in first.nodes if n.kind == "leaf"][0]
    assert "grad: None" in leaf_before.label                 # not yet accumulated at step 1
    assert "grad: [2.5, 0.5, -0.5]" in [n for n in t.graph.nodes if n.kind == "leaf"][0].label
    assert "#1 AddBackward0" in t.graph.source
    assert 'label="[1, 1, 1]"' in t.graph.source             # gradient shown on its edge
    assert "step 1: AddBackward0" in t.text()


def test_trace_backward_removes_its_hooks_and_accepts_gradient():
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    t = trace_backward(y, gradient=torch.ones(3), retain_graph=True)
    assert t.order == ["MulBackward0", "AccumulateGrad"]
    y.backward(torch.ones(3))                                 # no hook fires twice, nothing recorded
    assert len(t.order) == 2
    torch.testing.assert_close(x.grad, torch.full((3,), 4.0))


def test_trace_display_static_fallback_without_widgets():
    x = torch.randn(2, requires_grad=True)
    t = trace_backward((x * 3).sum())
    bundle = t._repr_mimebundle_()
    assert "step 1 of 3: SumBackward0" in bundle["text/html"]
    assert bundle["text/html"].count("<svg") == 3


# -- determinism, scale, rendering ------------------------------------------------
def test_same_code_gives_same_source_and_no_addresses():
    script = textwrap.dedent("""
        import torch, torch.nn as nn
        from autograd_lab import draw
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        loss = model(torch.randn(2, 3)).sum()
        g = draw(loss, show_saved=True, show_attrs=True, group_modules=model, legend=True)
        print(g.source)
        print(g.text())
    """)
    # Once in another process (different addresses), once here: the text must not change.
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    here = {}
    printed = []
    exec(script.replace("print(", "printed.append("), {"printed": printed}, here)
    runs = [other, "\n".join(printed) + "\n"]
    assert runs[0] == runs[1]
    assert not re.search(r"0x[0-9a-fA-F]{4,}", runs[0])
    assert "n0 [label=" in runs[0]


def test_rnn_of_1000_steps_draws_without_recursion():
    loss = rnn_loss(1000)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)          # a recursive walk would fail far below 1000 steps
    try:
        full = draw(loss, max_nodes=None)
        summarised = draw(loss)
    finally:
        sys.setrecursionlimit(limit)
    assert full.ops().count("TanhBackward0") == 1000
    assert len(full.nodes) > 9000
    assert len(summarised.nodes) == 1001
    more = summarised.nodes[-1]
    assert more.kind == "summary" and more.label.startswith(f"+{len(full.nodes) - 1000} more nodes")
    assert summarised.ops() == full.ops()                      # honest about the hidden part
    assert len(summarised.text().splitlines()) > 1000


def test_max_nodes_summary_edges():
    loss = rnn_loss(5)
    g = draw(loss, max_nodes=10)
    assert len(g.nodes) == 11
    ids = {n.id for n in g.nodes}
    assert all(src in ids and dst in ids for src, dst in g.edges)
    assert any(src == "n_more" for src, _ in g.edges)
    assert "Showing 10 of" in g.notes[0]


@pytest.mark.skipif(not layout.dot_available(), reason="graphviz dot not installed")
def test_svg_and_save_formats(tmp_path):
    w = torch.randn(2, requires_grad=True)
    g = draw((w * 2).sum(), legend=True)
    assert g.svg().lstrip().startswith("<?xml")
    assert "image/svg+xml" in g._repr_mimebundle_()
    for suffix in (".svg", ".png", ".pdf", ".dot", ".txt"):
        path = g.save(tmp_path / f"graph{suffix}")
        assert path.stat().st_size > 0
    assert (tmp_path / "graph.dot").read_text() == g.source
    assert (tmp_path / "graph.txt").read_text() == g.text() + "\n"
    with pytest.raises(ValueError, match="use one of"):
        g.save(tmp_path / "graph.jpeg")


def test_text_fallback_when_dot_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))              # an empty folder: no dot
    monkeypatch.setenv("AUTOGRAD_LAB_LAYOUT", "process")   # and no libgvc, as without graphviz
    w = torch.randn(2, requires_grad=True)
    g = draw((w * 2).sum())
    bundle = g._repr_mimebundle_()
    assert list(bundle) == ["text/plain"]
    first, rest = bundle["text/plain"].split("\n", 1)
    assert "graphviz's `dot` program was not found" in first and "apt install graphviz" in first
    assert rest == g.text()                                 # no picture: the text is the output
    with pytest.raises(LayoutError, match="not found on PATH"):
        g.save(tmp_path / "graph.svg")
    g.save(tmp_path / "graph.dot")                          # text formats still work
    trace = trace_backward((w * 2).sum())
    shown = trace._repr_mimebundle_()
    assert list(shown) == ["text/plain"] and "step 1: SumBackward0" in shown["text/plain"]


def test_legend_explains_only_what_is_drawn():
    x = torch.randn(3, requires_grad=True)
    y = x.sigmoid()
    y.mul_(2)
    g = draw(y.sum(), legend=True)
    legend = g.source.split("subgraph cluster_legend", 1)[1]
    assert "STALE: saved tensor modified" in legend and "leaf that requires grad" in legend
    assert "saved tensors freed" not in legend and "only in the first graph" not in legend
    assert "cluster_legend" not in draw(y.sum()).source


@pytest.mark.skipif(not layout.dot_available(), reason="graphviz dot not installed")
def test_layout_timeout_ends_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("AUTOGRAD_LAB_LAYOUT", "process")   # the limit is on the dot process
    g = draw(rnn_loss(300), max_nodes=None, layout_timeout=0.01)
    with pytest.raises(LayoutError, match=r"laying out \d+ nodes took more than 0.01 s"):
        g.svg()
    assert "took more than" in g._repr_mimebundle_()["text/plain"]
    with pytest.raises(LayoutError) as error:
        g.svg()
    assert "depth=" not in str(error.value)   # collapsing without record_modules could draw a cycle


# -- bad input ---------------------------------------------------------------------
@pytest.mark.parametrize("bad", [3.0, "loss", None, [1, 2]])
def test_non_tensor_is_a_type_error(bad):
    with pytest.raises(TypeError, match="expects tensors"):
        draw(bad)


def test_empty_input_is_a_type_error():
    with pytest.raises(TypeError, match="at least one tensor"):
        draw()
    with pytest.raises(TypeError, match="empty container"):
        draw([])


def test_bad_options_say_what_to_do():
    w = torch.randn(2, requires_grad=True)
    with pytest.raises(ValueError, match="view must be one of"):
        draw(w * 2, view="modules")
    with pytest.raises(TypeError, match="params= expects a dict"):
        draw(w * 2, params=[w])
    with pytest.raises(TypeError, match="group_modules= expects an nn.Module"):
        draw(w * 2, group_modules={"w": w})
    with pytest.raises(ValueError, match="needs group_modules=model"):
        draw(w * 2, depth=1)
    with pytest.raises(ValueError, match="max_nodes must be a whole number"):
        draw(w * 2, max_nodes=0)


def test_tensor_without_history_is_one_node_with_a_note():
    x = torch.randn(3)
    g = draw(x)
    assert len(g.nodes) == 1 and g.edges == []
    assert g.nodes[0].kind == "constant" and g.nodes[0].name == "x"
    assert "Nothing to draw: x has no grad_fn and does not require grad" in g.notes[0]
    assert g.notes[0] in g.text()


def test_leaf_root_and_inference_tensor():
    w = torch.randn(3, requires_grad=True)
    g = draw(w)
    assert [n.kind for n in g.nodes] == ["leaf"]
    with torch.inference_mode():
        made = torch.ones(2) * 3
    g = draw(made)
    assert "inference_mode" in g.notes[0]
    with pytest.raises(RuntimeError, match="needs a tensor with a graph"):
        trace_backward(torch.ones(2))


def test_graph_holds_no_tensors():
    x = torch.randn(1000, requires_grad=True)
    y = (x.exp() * 2).sum()
    g = draw(y, show_saved=True)
    assert isinstance(g, Graph)
    stack, seen = [g.__dict__], 0
    while stack:
        item = stack.pop()
        seen += 1
        assert not isinstance(item, (torch.Tensor, torch.autograd.graph.Node))
        if isinstance(item, dict):
            stack += list(item.keys()) + list(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack += list(item)
        elif hasattr(item, "__dict__"):
            stack.append(item.__dict__)
    assert seen > 10


def test_frames_are_a_lazy_sequence():
    loss = rnn_loss(30)
    t = trace_backward(loss)
    assert len(t.frames) == len(t.order) > 100
    assert t.frames._cache == {}                                # nothing built up front
    last = t.frames[-1]
    assert last is t.frames[len(t.order) - 1]
    assert [f.title for f in t.frames[:2]] == [f"step 1 of {len(t.order)}: SumBackward0",
                                               f"step 2 of {len(t.order)}: TanhBackward0"]
    with pytest.raises(IndexError, match="out of range"):
        t.frames[len(t.order)]


def test_trace_shows_a_slider_when_ipywidgets_is_installed(monkeypatch):
    shown = []

    class Widget:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs, self.observers = args, kwargs, []

        def observe(self, fn, names):
            self.observers.append(fn)

        def clear_output(self, wait=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    fake = type(sys)("ipywidgets")
    fake.IntSlider = fake.Output = fake.VBox = fake.HTML = Widget
    monkeypatch.setitem(sys.modules, "ipywidgets", fake)
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    x = torch.randn(2, requires_grad=True)
    t = trace_backward((x * 3).sum())
    t._ipython_display_()
    note, picture, first, box = shown
    slider, _, style = box.args[0]
    assert slider.kwargs["max"] == len(t.order) == 3
    assert first is t.frames[0]                                 # the first frame is shown at once
    slider.observers[0]({"new": 3})
    assert shown[-1] is t.frames[2]
    # Beside the widget, a plain picture of the whole trace that a saved notebook keeps;
    # the live slider hides it (CSS scoped to this trace's id), a reopened notebook shows it.
    assert picture is t.graph and "image/svg+xml" in picture._repr_mimebundle_()
    key = re.search(r'id="(autograd-lab-trace-[0-9a-f]+)"', note["text/html"]).group(1)
    assert f":has(#{key})" in style.args[0] and "display: none" in style.args[0]

"""Regression tests for issue 24: in-process layout, one layout per trace, truncation that keeps the
structure, bounded frames, no cycles when grouping, outputs that survive a reopen, and the findings
on real models (nested tensors, checkpointing, vmap, floating constants, parameter names)."""

import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from autograd_lab import draw, trace_backward
from autograd_lab.viz import describe, layout, modules, record_modules, text
from autograd_lab.viz.graph import quick_layout

from test_viz_lessons import OLD_TORCH, Counted
from test_viz_modules import acyclic, import_or_skip

needs_dot = pytest.mark.skipif(not layout.dot_available(), reason="graphviz dot not installed")


def rnn_loss(steps, hidden=4):
    torch.manual_seed(0)
    Wx = torch.randn(3, hidden, requires_grad=True)
    Wh = torch.randn(hidden, hidden, requires_grad=True)
    h = torch.zeros(1, hidden)
    for _ in range(steps):
        h = torch.tanh(torch.randn(1, 3) @ Wx + h @ Wh)
    return h.sum()


# -- 1. layout in this process ------------------------------------------------------
@needs_dot
def test_a_small_graph_is_laid_out_in_this_process_and_the_dot_process_still_works(monkeypatch):
    loss = rnn_loss(3)
    g = draw(loss)
    assert quick_layout(g._model)
    if layout.backend() == "libgvc":   # graphviz's library found: no dot process for this picture
        monkeypatch.setattr(layout.subprocess, "run", lambda *a, **k: pytest.fail("ran a dot process"))
    svg = draw(loss).svg()
    monkeypatch.undo()
    monkeypatch.setenv("AUTOGRAD_LAB_LAYOUT", "process")
    assert layout.backend() == "dot process"
    by_process = draw(loss).svg()
    titles = lambda s: sorted(re.findall(r"<title>(n\d+)</title>", s))   # noqa: E731
    assert titles(svg) == titles(by_process) == sorted(n.id for n in g.nodes)


@needs_dot
def test_without_graphviz_s_library_the_dot_process_draws(monkeypatch):
    monkeypatch.setattr(layout, "_LOADED", [None])   # libgvc or its plugins not found
    assert layout.backend() == "dot process"
    trace = trace_backward(rnn_loss(2))
    assert "<svg" in draw(rnn_loss(2)).svg() and "<svg" in trace.frames[-1].svg()   # neato -n2 for frames


def test_clustered_or_huge_graphs_go_to_the_dot_process_with_its_time_limit():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    with record_modules(model):
        loss = model(torch.randn(1, 2)).sum()
    assert not quick_layout(draw(loss, group_modules=model)._model)       # frames: dot process
    assert not quick_layout(draw(rnn_loss(300), max_nodes=None)._model)   # > 1500 nodes
    assert quick_layout(draw(rnn_loss(20))._model)


# -- 2. one layout for every frame of a trace ---------------------------------------------
def _boxes(svg):
    """node id -> (x min, x max, y min, y max) of its outline (the box's polygon or rounded path)."""
    found = {}
    for m in re.finditer(r'<title>(n\d+)</title>\s*<(?:polygon|path)[^>]*? (?:points|d)="([^"]+)"', svg):
        pairs = [tuple(map(float, p)) for p in re.findall(r"(-?[\d.]+),(-?[\d.]+)", m.group(2))]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        found[m.group(1)] = (min(xs), max(xs), min(ys), max(ys))
    return found


@needs_dot
def test_every_frame_of_a_trace_is_drawn_on_one_layout(monkeypatch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w
    for _ in range(5):
        h = torch.tanh(h * w)
    trace = trace_backward(h.sum())
    engines = []
    render = layout.render
    monkeypatch.setattr(layout, "render", lambda *a, **k: engines.append((a[1], k.get("engine", "dot")))
                        or render(*a, **k))
    pictures = [frame.svg() for frame in trace.frames] + [trace.graph.svg()]
    # One layout (json0, by dot) for all frames and the whole-trace picture; each is only drawn (nop2).
    assert [e for e in engines if e[1] == "dot"] == [("json0", "dot")]
    assert [e for e in engines if e[1] == "nop2"] == [("svg", "nop2")] * (len(trace.frames) + 1)
    first, last, whole = _boxes(pictures[0]), _boxes(pictures[-2]), _boxes(pictures[-1])
    assert first.keys() == last.keys() == whole.keys() and len(first) > 10
    for node_id in first:   # every box has the same place and size in every picture of the trace
        assert first[node_id] == pytest.approx(last[node_id], abs=0.01), node_id
        assert whole[node_id] == pytest.approx(last[node_id], abs=0.01), node_id


# -- 3. truncation shows the structure ---------------------------------------------------
def lstm_loss(steps, cell=None):
    torch.manual_seed(0)
    cell = cell or nn.LSTMCell(3, 4)
    h = c = torch.zeros(1, 4)
    for x in torch.randn(steps, 1, 3):
        h, c = cell(x, (h, c))
    return h.sum(), cell


def test_truncating_an_unrolled_lstm_keeps_ops_nearest_the_output_not_copies_of_a_weight():
    loss, cell = lstm_loss(300)
    full = draw(loss, max_nodes=None, params=dict(cell.named_parameters()))
    g = draw(loss, max_nodes=200, params=dict(cell.named_parameters()))
    kinds = [n.kind for n in g.nodes if n.kind != "summary"]
    assert len(kinds) == 200
    assert kinds.count("op") >= 100                      # issue 24: 20 ops and 980 copies of one bias
    copies = [n for n in g.nodes if n.kind == "leaf" and n.name == "bias_hh"]
    kept_ops = {n.id for n in g.nodes if n.kind == "op"}
    assert all(dst in kept_ops for c in copies for src, dst in g.edges if src == c.id)
    # The kept part is the part nearest the output: the ops of the last steps, in traversal order.
    first_ops = [n.id for n in full.nodes if n.kind == "op"][:50]
    assert set(first_ops) <= kept_ops
    assert "nearest the output" in g.notes[-1]


def test_focus_keeps_the_part_the_student_asked_for():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    h = w
    for i in range(200):
        h = torch.sin(h) * 2
        if i == 20:
            early = h
    g = draw(h.sum(), max_nodes=30, focus=early)
    assert early.grad_fn.__class__.__name__ in {n.op for n in g.nodes}
    near = [n.id for n in g.nodes if n.kind == "op"]
    assert "n0" not in near                                        # the output is far away: left out
    assert "focus=" in g.notes[-1]
    assert any(n.id == "n_more_out" for n in g.nodes)              # hidden consumers: their own box
    with pytest.raises(ValueError, match="focus= takes tensors of the drawn graph"):
        draw(h.sum(), focus=torch.randn(3, requires_grad=True))


def test_the_number_of_module_frames_is_bounded_with_a_note_saying_what_was_merged():
    cell = nn.LSTMCell(3, 4)
    model = nn.ModuleDict({"cell": cell})
    with record_modules(model):
        loss, _ = lstm_loss(150, cell)
    g = draw(loss, group_modules=model, max_nodes=None)
    frames = {n.cluster[:d] for n in g.nodes for d in range(1, len(n.cluster) + 1)}
    assert len(frames) <= modules.MAX_CLUSTERS
    [note] = [n for n in g.notes if "module frames" in n]
    assert "150 calls of cell" in note and "runs of" in note
    assert any("(calls 1-" in label for label in g._model.cluster_labels.values())
    assert acyclic(g)


# -- 4. outputs that survive a save and a reopen ------------------------------------------
@needs_dot
def test_the_saved_plain_text_beside_a_picture_is_one_line():
    g = draw(rnn_loss(100))
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/plain"}
    assert "\n" not in bundle["text/plain"] and len(bundle["text/plain"]) < 200
    assert "g.text()" in bundle["text/plain"]


def test_text_is_linear_in_the_size_of_the_graph():
    small, large = draw(rnn_loss(100), max_nodes=None).text(), draw(rnn_loss(400), max_nodes=None).text()
    assert len(large) < 4.4 * len(small)                  # 4x the graph: about 4x the text
    width = max(len(line) for line in large.splitlines() if "[n" in line)
    assert width < 3 * text.MAX_DEPTH + 120
    assert "inputs, continued:" in large


# -- 5. every grouping path draws no cycle, or refuses with a note ----------------------------
class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        h = self.a(x).relu()                    # relu: outside any module when not recorded
        h = F.linear(h, self.a.weight)          # reads a's weight again: placed in a
        return self.b(h).sum()


@pytest.mark.parametrize("recorded", [False, True])
@pytest.mark.parametrize("depth", [None, 1, 2, 3])
def test_every_grouping_path_draws_no_cycle_or_refuses_with_a_note(recorded, depth):
    torch.manual_seed(0)
    model = Twice()
    x = torch.randn(2, 3)
    if recorded:
        with record_modules(model):
            loss = model(x)
    else:
        loss = model(x)
    g = draw(loss, group_modules=model, depth=depth)
    refused = [n for n in g.notes if "would form a cycle" in n]
    assert acyclic(g) or refused
    if refused:
        assert "record_modules" in refused[0] and not any(n.kind == "summary" for n in g.nodes)
    if depth == 1 and not recorded:
        assert refused                          # a -> relu -> a: the guessed grouping would cycle


# -- 6. the other findings --------------------------------------------------------------------
def test_nested_tensors_in_the_strided_layout_draw_and_trace():
    nt = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=torch.strided,
                                    requires_grad=True)
    g = draw(nt * 2)
    assert describe.shape_of(nt) == (2, "ragged", 3) and "(2, ragged, 3)" in g.text()
    y = torch.nested.to_padded_tensor(nt * 2, 0.0).sum()
    trace = trace_backward(y)
    assert trace.order[-1] == "AccumulateGrad" and "(2, ragged, 3)" in trace.steps[-1][2][0]
    assert nt.grad is not None


@OLD_TORCH
def test_show_saved_on_a_checkpointed_model_reruns_nothing_and_frames_each_segment():
    torch.manual_seed(0)
    blocks = nn.ModuleList([Counted() for _ in range(3)])
    h = torch.randn(8, 4, requires_grad=True)
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False)
    loss = h.square().sum()
    g = draw(loss, show_saved=True)
    assert [(b.calls, int(b.bn.num_batches_tracked)) for b in blocks] == [(1, 1)] * 3   # issue 24: 13
    assert sorted({n.segment for n in g.nodes if n.segment}) == [1, 2, 3]
    assert {n.cluster for n in g.nodes if n.kind == "op" and n.segment} == {
        (f"checkpointed segment {k}",) for k in (1, 2, 3)}
    assert any("never read here, not even with show_saved=True" in n for n in g.notes)
    saved = [n for n in g.nodes if n.kind == "saved" and n.state == "checkpointed"]
    assert saved and all("recomputed in backward" in n.label for n in saved)
    assert "checkpointed segment 1 (recomputed in backward)" in g.source


def test_a_reentrant_checkpoint_is_marked_as_a_segment():
    block = Counted()
    x = torch.randn(8, 4, requires_grad=True)
    g = draw(checkpoint(block, x, use_reentrant=True).sum())
    [node] = [n for n in g.nodes if n.op == "CheckpointFunctionBackward"]
    assert "run again in backward" in node.label
    assert any("use_reentrant=True" in n for n in g.notes)


def test_the_vmap_note_is_true_and_the_output_of_vmap_draws():
    notes = []

    def f(row):
        notes.extend(draw(row * 2).notes)
        return row * 2

    x = torch.randn(3, 2, requires_grad=True)
    out = torch.func.vmap(f)(x)
    assert "per-example view has no grad_fn" in notes[0] and "do not build" not in notes[0]
    assert out.grad_fn is not None and "MulBackward0" in draw(out.sum()).ops()


class MaskedBlock(nn.Module):
    """Attention-like maths with a constant mask made inside the block (GPT-2's causal mask)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.tril(torch.ones(x.shape[0], x.shape[0]))
        return (mask @ self.proj(x)).relu() + x


def test_a_collapsed_block_takes_its_constants_with_it():
    torch.manual_seed(0)
    model = nn.Sequential(MaskedBlock(), MaskedBlock())
    with record_modules(model):
        loss = model(torch.randn(3, 4, requires_grad=True)).sum()
    inside = draw(loss, group_modules=model)
    masks = [n for n in inside.nodes if n.kind == "constant"]
    assert masks and all(n.cluster for n in masks)     # each mask sits in its block's frame
    collapsed = draw(loss, group_modules=model, depth=1)
    assert not [n for n in collapsed.nodes if n.kind == "constant"]   # issue 24: 11 floated outside
    assert acyclic(collapsed)


def test_module_frames_do_not_rank_parameters():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    with record_modules(model):
        loss = model(torch.randn(1, 2)).sum()
    source = draw(loss, group_modules=model).source
    leaves = [n.id for n in draw(loss, group_modules=model).nodes if n.kind == "leaf"]
    for leaf in leaves:   # parameters stay in a row at the top of their frame: no staircase
        assert re.search(rf"  {leaf} -> n\d+ \[constraint=\"false\"\]", source), leaf
    assert "constraint" not in draw(model(torch.randn(1, 2)).sum()).source   # no frames: ranked as usual


def test_parameters_of_a_model_no_variable_holds_are_named():
    def make_model():                                   # notebook 07's cell: the model is a temporary
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    loss = F.mse_loss(make_model()(torch.randn(5, 4)), torch.randn(5, 1))
    labels = sorted(n.label.split("\n")[0] for n in draw(loss).nodes if n.kind == "leaf")
    assert labels == ["0.bias (8,)", "0.weight (8, 4)", "2.bias (1,)", "2.weight (1, 8)"]
    model = make_model()
    loss = model(torch.randn(5, 4)).sum()
    assert "model.0.weight" in {n.name for n in draw(loss).nodes}   # a variable's name still wins


def test_a_package_that_raises_at_import_is_skipped_not_an_error(tmp_path, monkeypatch):
    (tmp_path / "broken_vision.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="nms does not exist"):
        import_or_skip("broken_vision")

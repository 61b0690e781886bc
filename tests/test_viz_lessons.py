"""Regression tests for issue 15: pictures that never contradict the lesson, and no side effects."""

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from autograd_lab import diff, draw
from autograd_lab.viz import compare, describe
from autograd_lab.viz.model import Model, Node


# -- shared leaves ----------------------------------------------------------------
def test_fan_in_draws_x_once_like_pytorch_has_one_accumulate_grad():
    x = torch.tensor(2.0, requires_grad=True)
    y = x**2 + 3 * x
    g = draw(y)
    [leaf] = [n for n in g.nodes if n.kind == "leaf"]
    assert leaf.name == "x"
    ops = {n.id: n.op for n in g.nodes}
    assert sorted(ops[dst] for src, dst in g.edges if src == leaf.id) == ["MulBackward0", "PowBackward0"]


def test_leaf_used_past_the_threshold_is_split_with_labels_and_a_legend_line():
    w = torch.randn(2, requires_grad=True)
    h = torch.zeros(2)
    for _ in range(17):
        h = torch.tanh(h * w)
    g = draw(h.sum(), legend=True)
    copies = [n for n in g.nodes if n.kind == "leaf"]
    assert len(copies) == 17 and copies[1].label.startswith("w (2,), use 2 of 17")
    assert "one leaf drawn once per use" in g.source
    assert g.ops().count("AccumulateGrad") == 1
    assert len([n for n in draw(h.sum(), split_leaves=False).nodes if n.kind == "leaf"]) == 1


def test_diff_reports_a_shared_leaf_once():
    w = torch.randn(3, requires_grad=True)
    a = draw((w * w).sum() + (w * 2).sum())
    b = draw((w.detach() * w.detach()).sum())
    d = diff(a, b)
    assert [line for line in d.only_in_a if line.startswith("w ")] == [d.only_in_a[-1]]
    split = diff(draw((w * w).sum() + (w * 2).sum(), split_leaves=True), b)
    assert sum(line.startswith("w ") for line in split.only_in_a) == 1


def _chain(n):
    nodes = [Node(f"n{i}", "op", "AddBackward0", None, f"op{i}", shape=(i,)) for i in range(n)]
    return Model(nodes=nodes, edges=[(f"n{i + 1}", f"n{i}") for i in range(n - 1)])


def test_diff_is_linear_in_graph_size(monkeypatch):
    """The matching scans each graph's keys once (it used to rebuild a set per node: 8 s at 8k nodes).

    Counted, not timed: a timing assertion would flake on a shared machine."""
    scans = []

    class Keys(dict):
        def values(self):
            scans.append(len(self))
            return super().values()

    occurrences = compare._occurrences
    monkeypatch.setattr(compare, "_occurrences", lambda nodes: Keys(occurrences(nodes)))
    compare.diff_models(_chain(2000), _chain(2000))
    assert len(scans) == 2


# -- no side effects --------------------------------------------------------------
class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.bn, self.calls = nn.Linear(4, 4), nn.BatchNorm1d(4), 0

    def forward(self, x):
        self.calls += 1
        return torch.nn.functional.dropout(self.bn(self.lin(x)).relu(), 0.5, training=True)


OLD_TORCH = pytest.mark.skipif(
    not describe.can_tell_hooks(),
    reason="this torch's SavedTensor has no unpack_hook, so draw cannot tell a checkpointed tensor")


@pytest.mark.parametrize("reentrant", [pytest.param(False, marks=OLD_TORCH), True])
def test_drawing_a_checkpointed_model_changes_nothing(reentrant):
    def run(draw_it):
        torch.manual_seed(0)
        block = Counted()
        x = torch.randn(8, 4, requires_grad=True)
        loss = checkpoint(block, x, use_reentrant=reentrant).square().sum()
        state = (block.calls, int(block.bn.num_batches_tracked), block.bn.running_mean.clone(),
                 torch.get_rng_state())
        if draw_it:
            g = draw(loss)
            g.source, g.stale(), g.freed()
            after = (block.calls, int(block.bn.num_batches_tracked), block.bn.running_mean.clone(),
                     torch.get_rng_state())
            assert after[:2] == state[:2] == (1, 1)
            assert torch.equal(after[2], state[2]) and torch.equal(after[3], state[3])
        loss.backward()
        return block.lin.weight.grad.clone(), x.grad.clone(), block.calls

    drawn, plain = run(True), run(False)
    assert torch.equal(drawn[0], plain[0]) and torch.equal(drawn[1], plain[1])
    assert drawn[2] == plain[2]


def test_an_unpack_hook_that_raises_makes_the_tensor_unreadable_not_a_crash():
    x = torch.randn(3, requires_grad=True)

    def unpack(_):
        raise ValueError("offloaded to a disk that is gone")

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = (x.sin() * 2).sum()
    g = draw(y)
    assert "SinBackward0" in g.ops()
    if describe.can_tell_hooks():
        assert any("not read" in note for note in g.notes)
    shown = draw(y, show_saved=True)
    assert any("unreadable" in note and "ValueError" in note for note in shown.notes)
    assert "SinBackward0" in shown.ops()


# -- honest inputs ------------------------------------------------------------------
def test_jagged_nested_tensor_is_described_without_crashing():
    nt = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=torch.jagged,
                                    requires_grad=True)
    g = draw((nt * 2).values().sum())
    assert g.ops()[0] == "SumBackward0"
    assert describe.shape_text(nt.shape).startswith("(2, j")


def test_vmap_note_does_not_ask_for_requires_grad():
    notes = []

    def f(row):
        notes.extend(draw(row * 2).notes)
        return row

    torch.func.vmap(f)(torch.randn(3, 2))
    assert notes and "vmap" in notes[0] and "requires_grad=True" not in notes[0]


def _constants(graph):
    return [n for n in graph.nodes if n.kind == "constant"]


def _forward(inputs, weight):
    return (inputs * weight).sum()   # the caller's name, not `inputs`, is what the picture shows


def test_the_callers_input_keeps_its_name_through_the_saved_attribute():
    w = torch.randn(3, requires_grad=True)
    batch = torch.randn(3) * 2          # a non-leaf that needs no grad: MulBackward0 saves it as self
    [x] = _constants(draw(_forward(batch, w)))
    assert x.name == "batch" and x.arg == "self" and x.label.startswith("batch (3,)")
    [x] = _constants(draw(_forward(batch, w), params={"x": batch}))
    assert x.name == "x" and x.label.startswith("x (3,)")


def test_x_is_named_when_the_op_saved_fewer_tensors_than_it_has_constants():
    """addmm saves mat1 but not its bias: matching by count named neither (1 saved, 2 constants)."""
    bias, x, weight = torch.randn(2), torch.randn(4, 3), torch.randn(3, 2, requires_grad=True)
    constants = {n.arg: n for n in _constants(draw(torch.addmm(bias, x, weight).sum()))}
    assert constants["mat1"].name == "x" and constants["mat1"].label.startswith("x (4, 3)")
    assert constants["self"].name is None and constants["self"].label == "self\nno grad"


def test_unnamed_saved_inputs_are_labelled_by_their_attribute():
    b = torch.randn(3, 2, requires_grad=True)
    [first] = _constants(draw(torch.mm(torch.randn(2, 3), b).sum()))
    assert first.name is None and first.label.startswith("self (2, 3)")
    a = torch.randn(2, 3, requires_grad=True)
    g = draw(torch.mm(a, torch.randn(3, 2)).sum(), show_saved=True)
    [second] = _constants(g)
    assert second.label.startswith("mat2 (3, 2)")
    # only mat2 is saved (a's gradient needs it): the constant and the saved box say the same name
    assert [n.label.splitlines()[0] for n in g.nodes if n.kind == "saved"] == ["saved mat2"]
    assert "self (2, 3)" in draw(torch.mm(torch.randn(2, 3), b).sum(), view="tensor").source


def test_a_saved_output_keeps_its_name_and_a_detached_copy_does_not_borrow_it():
    w = torch.randn(3, requires_grad=True)
    h = torch.tanh(w)                   # TanhBackward0 saves its result: unpacked, a new object
    [saved] = [n for n in draw(h.sum(), show_saved=True).nodes if n.kind == "saved"]
    assert saved.label.splitlines()[-1] == "= h"
    [copy] = _constants(draw((h.detach() * w).sum()))   # same memory, but no grad_fn
    assert copy.name is None and copy.arg == "self"


def test_a_hooked_constant_is_named_by_its_argument_without_running_the_hook():
    unpacked = []

    def unpack(t):
        unpacked.append(t.shape)
        return t

    w, x = torch.randn(3, 2, requires_grad=True), torch.randn(2, 3)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = torch.mm(x, w).sum()
    [constant] = _constants(draw(y))
    if describe.can_tell_hooks():   # torch 2.5 cannot tell a hooked tensor and reads it as before
        assert unpacked == [] and constant.label == "self\nno grad"
    [constant] = _constants(draw(y, show_saved=True))
    assert constant.name == "x"


def test_a_schema_the_saved_tensors_contradict_is_not_used():
    """where's mask is a tensor argument but no input: its overloads must not name the slots."""
    w, x = torch.randn(3, requires_grad=True), torch.randn(3)
    [constant] = _constants(draw(torch.where(x > 0, x, w).sum()))
    assert constant.arg is None and constant.label == "constant\nno grad"


def test_one_node_is_singular():
    w = torch.randn(2, requires_grad=True)
    loss = (w * 2).sum()
    g = draw(loss, max_nodes=4)   # loss, Sum, Mul, w; the constant 2 is left out
    assert "+1 more node\n" in [n for n in g.nodes if n.kind == "summary"][0].label
    assert "the other one is summarised" in g.notes[-1]


# -- speed: work only for what is drawn ---------------------------------------------
def _counting(monkeypatch, name):
    calls = []
    original = getattr(describe, name)
    monkeypatch.setattr(describe, name, lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_only_nodes_that_can_be_drawn_are_labelled(monkeypatch):
    """Counted, not timed: output_shapes runs once per labelled op (a 300-op chain, max_nodes=20)."""
    from autograd_lab import trace_backward
    w = torch.randn(4, requires_grad=True)
    h = w
    for _ in range(150):
        h = torch.tanh(h) * 2
    labelled = _counting(monkeypatch, "output_shapes")
    draw(h.sum(), max_nodes=20)
    assert 0 < len(labelled) <= 20
    labelled.clear()
    trace_backward(h.sum(), max_nodes=20)   # two walks (before and after the backward)
    assert 0 < len(labelled) <= 40


def test_the_grad_fn_view_takes_no_norm_of_parameters_or_large_inputs(monkeypatch):
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    loss = model(torch.randn(32, 64)).sum()
    described = _counting(monkeypatch, "values_text")
    draw(loss, params=dict(model.named_parameters()))
    assert len(described) == 1           # the root's value, which its label shows
    described.clear()
    draw(loss, params=dict(model.named_parameters()), view="tensor")
    assert len(described) > 4            # the tensor view shows every tensor's data


# -- both themes -----------------------------------------------------------------
def test_background_is_transparent_and_every_node_is_filled():
    w = torch.randn(2, requires_grad=True)
    y = w * torch.tensor([1.0, 2.0])
    y.sum().backward(retain_graph=False)
    source = draw(y, legend=True).source
    assert 'bgcolor="transparent"' in source
    # Every node starts filled (the node defaults); a node line that sets its own style keeps it.
    defaults = next(line for line in source.splitlines() if line.strip().startswith("node ["))
    assert 'style="filled"' in defaults
    node_lines = [line for line in source.splitlines() if "[label=" in line and "->" not in line]
    styles = [part.split('"')[1] for line in node_lines for part in line.split(" style=")[1:]]
    assert node_lines and styles and all("filled" in style for style in styles)


# -- trace_backward in a notebook ------------------------------------------------
def _long_trace():
    from autograd_lab import trace_backward
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = w
    for _ in range(6):
        h = torch.tanh(h * w)
    return trace_backward(h.sum())


def test_static_fallback_shows_a_few_key_frames_and_a_table_of_every_step():
    trace = _long_trace()
    steps = len(trace.order)
    assert steps > 10
    page = trace._repr_mimebundle_()["text/html"]
    assert page.count("<svg") == 3 and page.count("<tr>") == steps + 1
    assert "TanhBackward0" in page and "norm" in page and "into .grad: (2,) norm" in page


def test_slider_covers_every_step_when_ipywidgets_is_installed():
    widgets = pytest.importorskip("ipywidgets")   # pinned in requirements/course.txt
    from autograd_lab.viz.trace import _slider
    trace = _long_trace()
    box = _slider(trace.frames, widgets)
    slider = box.children[0]
    assert (slider.min, slider.max) == (1, len(trace.order))


def test_absent_optional_inputs_draw_nothing_and_a_real_constant_still_shows():
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    for layer in (nn.Conv2d(3, 3, 3, bias=False), nn.BatchNorm2d(3, affine=False),
                  nn.LayerNorm([5], elementwise_affine=False), nn.GroupNorm(1, 3, affine=False)):
        g = draw(layer(x).sum())
        assert not [n for n in g.nodes if n.kind == "constant"], type(layer).__name__
    weight = torch.randn(3, 3, 3, 3, requires_grad=True)
    bias = torch.ones(3)   # a real tensor that needs no grad: still drawn
    g = draw(torch.nn.functional.conv2d(x, weight, bias).sum())
    assert [n.kind for n in g.nodes].count("constant") == 1
    image = torch.randn(1, 3, 5, 5)   # the input needs no grad; the bias is None
    g = draw(torch.nn.functional.conv2d(image, weight).sum())
    assert [n.name for n in g.nodes if n.kind == "constant"] == ["image"]

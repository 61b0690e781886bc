import torch
import torch.nn as nn

from autograd_lab.labs.memory import memory_breakdown, optimizer_state_bytes, saved_tensors, tensor_bytes, tensors_made


def mlp(depth, width=32):
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


def test_linear_tanh_stack_saves_one_activation_per_block_plus_input():
    # Linear saves its input, Tanh its output; a block's output is the next block's
    # input, so a stack of n blocks holds n + 1 distinct activations.
    for depth in (1, 3, 6):
        model = mlp(depth)
        with saved_tensors(exclude=model.parameters()) as saved:
            model(torch.randn(8, 32))
        assert saved.count == depth + 1
        assert saved.nbytes == (depth + 1) * 8 * 32 * 4


def test_parameters_count_unless_excluded():
    model = nn.Linear(4, 3)
    with saved_tensors() as saved:
        model(torch.randn(2, 4))
    assert saved.count == 1  # the input, for the weight's gradient
    with saved_tensors() as saved:
        model(torch.randn(2, 4, requires_grad=True))
    # Now the input needs a gradient too, and that one needs the weight, which
    # addmm saves as the view weight.t(): excluding by storage still catches it.
    assert {t.shape for t in saved.tensors} == {(2, 4), (4, 3)}
    with saved_tensors(exclude=model.parameters()) as saved:
        model(torch.randn(2, 4, requires_grad=True))
    assert [t.shape for t in saved.tensors] == [(2, 4)]


def test_repeated_saves_of_one_tensor_count_once():
    x = torch.randn(5, requires_grad=True)
    with saved_tensors() as saved:
        x * x
    assert saved.saves == 2
    assert saved.count == 1
    assert saved.nbytes == 5 * 4


def test_no_grad_saves_nothing():
    model = mlp(2)
    with torch.no_grad(), saved_tensors() as saved:
        model(torch.randn(4, 32))
    assert saved.count == 0 and saved.nbytes == 0


def test_memory_breakdown_counts_grads_only_when_set():
    model = nn.Linear(10, 10)
    optimizer = torch.optim.Adam(model.parameters())
    with saved_tensors(exclude=model.parameters()) as saved:
        loss = model(torch.randn(3, 10)).sum()
    before = memory_breakdown(model, optimizer, saved)
    assert before == {"params": 440, "grads": 0, "optimizer_state": 0, "saved_activations": 120}
    loss.backward()
    optimizer.step()
    after = memory_breakdown(model, optimizer, saved)
    assert after["grads"] == 440
    # Adam keeps two moments per parameter plus a scalar step count per tensor.
    assert after["optimizer_state"] == optimizer_state_bytes(optimizer) == 2 * 440 + 2 * 4
    optimizer.zero_grad()  # set_to_none=True frees the gradients
    assert memory_breakdown(model)["grads"] == 0


def test_tensor_bytes_skips_none():
    assert tensor_bytes([torch.zeros(3, dtype=torch.float64), None]) == 24


def test_tensors_made_sees_what_a_backward_creates_and_skips_views_of_excluded_tensors():
    W = torch.randn(40, 30, dtype=torch.float64)
    x = torch.randn(30, dtype=torch.float64, requires_grad=True)
    y = torch.tanh(W @ x)
    with tensors_made(exclude=[W]) as made:          # the backward's W.t() is a view of W: not counted
        y.backward(torch.ones(40, dtype=torch.float64))
    assert made.shapes and max(s[0] for s in made.shapes) <= 40 and all(len(s) == 1 for s in made.shapes)
    with tensors_made() as made:                     # a Jacobian built on purpose is seen
        torch.autograd.functional.jacobian(lambda t: torch.tanh(W @ t), x.detach())
    assert (40, 30) in made.shapes


def test_a_measured_forward_frees_its_activations_without_a_backward_pass():
    # The measurement must not keep what it measures: a saved output packed as itself holds its own
    # grad_fn (a cycle gc cannot break), which leaked every measured activation (seen on an H100).
    import gc
    import weakref

    model = mlp(2)
    with saved_tensors(exclude=model.parameters()) as saved:
        out = model(torch.randn(8, 32, requires_grad=True))
    alive = weakref.ref(out)
    del out
    gc.collect()
    assert saved.count == 3 and alive() is None


def test_a_measured_forward_gives_the_same_gradients_as_an_unmeasured_one():
    torch.manual_seed(0)
    model, x = mlp(3), torch.randn(8, 32, requires_grad=True)
    model(x).square().sum().backward()
    plain = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    x.grad = None
    with saved_tensors(exclude=model.parameters()):
        loss = model(x).square().sum()
    loss.backward()
    assert all(torch.equal(a, b) for a, b in zip(plain, [x.grad] + [p.grad for p in model.parameters()]))

import pytest
import torch
import torch.nn as nn

from autograd_lab.labs.recompute import activations_kept, forward_saved, measure_segments, predicted_saved


def _tanh_mlp(n_blocks, width=16):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n_blocks)])


def test_formula_is_minimal_at_sqrt_n():
    counts = {s: predicted_saved(16, s) for s in (1, 2, 4, 8, 16)}
    assert counts == {1: 17, 2: 10, 4: 8, 8: 10, 16: 17}


def test_formula_matches_a_real_forward_pass():
    model = _tanh_mlp(8)
    x = torch.randn(4, 16, requires_grad=True)
    for segments in (1, 2, 4, 8):
        assert activations_kept(forward_saved(model, x, segments)) == predicted_saved(8, segments)


def test_measure_segments_reports_every_schedule():
    model = _tanh_mlp(4)
    x = torch.randn(4, 16, requires_grad=True)
    rows = measure_segments(model, x, [1, 2, 4], repeat=1)
    assert [r.segments for r in rows] == [1, 2, 4]
    assert all(r.saved == r.predicted for r in rows)
    assert rows[1].saved_bytes < rows[0].saved_bytes
    assert all(r.seconds > 0 for r in rows)


def test_non_divisor_is_refused_with_the_valid_choices():
    with pytest.raises(ValueError, match=r"one of \[1, 2, 3, 6\]"):
        predicted_saved(6, 4)


def test_a_checkpoint_saves_an_empty_placeholder_on_older_releases_and_activations_kept_ignores_it():
    # notebook 06 counts activations_kept (tensors that hold data), the same on every release;
    # the raw count of saved tensors is what versions.behaviour("checkpoint_saved_tensors") says
    from torch.utils.checkpoint import checkpoint

    from autograd_lab import versions
    from autograd_lab.labs.memory import saved_tensors

    model = _tanh_mlp(4)
    x = torch.randn(4, 16, requires_grad=True)
    with saved_tensors(exclude=model.parameters()) as saved:
        checkpoint(model, x, use_reentrant=False)
    assert saved.count == versions.behaviour("checkpoint_saved_tensors").value
    assert activations_kept(saved) == 1


def test_checkpoint_segments_runs_any_schedule_and_refuses_sizes_that_miss_blocks():
    from autograd_lab.labs.recompute import checkpoint_segments

    model = _tanh_mlp(6)
    x = torch.randn(4, 16, requires_grad=True)
    torch.testing.assert_close(checkpoint_segments(model, x, [3, 2, 1]), model(x))
    with pytest.raises(ValueError, match="cover 5 blocks; the model has 6"):
        checkpoint_segments(model, x, [3, 2])

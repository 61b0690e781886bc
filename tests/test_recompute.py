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


def test_the_gpu_measurements_run_end_to_end_with_a_stand_in_for_the_cuda_allocator(monkeypatch):
    # No GPU here: the CUDA calls are stubbed so that every line of the two GPU measurements runs on the
    # CPU (a typo in a branch nobody can run would otherwise reach a student with a GPU first).
    from autograd_lab.labs import cuda_cache, recompute

    for name in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda *args, **kwargs: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, lambda *args, **kwargs: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *args, **kwargs: (0, 0))

    peak = recompute.checkpoint_peak(torch.device("cpu"), n_blocks=4, width=8, batch=16, repeat=1)
    assert [row[0] for row in peak.rows] == ["no checkpoint", "2 segments", "save_on_cpu(pin_memory=True)"]
    assert {"peak_error_s1", "peak_error_sqrt", "offload_blocks", "peak_blocks_s1", "overhead_measured",
            "overhead_predicted"} <= set(peak.facts)
    assert peak.rows[1][3] == pytest.approx(
        recompute.predicted_peak(recompute.uniform(4, 2), 8, 16).blocks)       # the model, RNG term 0

    cache = cuda_cache.empty_cache_steps(torch.device("cpu"), size=1024)
    assert [row[0] for row in cache.rows] == list(cuda_cache.STEPS) and len(cache.facts) == 7

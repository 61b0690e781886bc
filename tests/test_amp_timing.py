import pytest
import torch
import torch.nn as nn

from autograd_lab.labs.amp_timing import measure_precision


def _model_and_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, torch.randn(8, 16), torch.randint(0, 4, (8,))


@pytest.mark.parametrize("mode", ["fp32", "bf16", "fp16"])
def test_each_cpu_mode_trains_and_reports_a_row(mode):
    model, x, y = _model_and_batch()
    before = [p.detach().clone() for p in model.parameters()]
    row = measure_precision(model, x, y, mode, repeat=1)
    assert row.mode == mode and row.seconds > 0 and row.samples_per_s == pytest.approx(8 / row.seconds)
    assert row.peak_bytes is None  # no allocator statistics on CPU
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))  # the steps ran
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32


def test_autocast_saves_16_bit_activations_plus_weight_copies():
    model, x, y = _model_and_batch()
    fp32 = measure_precision(model, x, y, "fp32", repeat=1).saved_bytes
    bf16 = measure_precision(model, x, y, "bf16", repeat=1).saved_bytes
    weight_copies = sum(p.numel() for p in model.parameters() if p.dim() == 2) * 2
    assert bf16 - weight_copies < fp32


def test_tf32_and_unknown_modes_are_refused_with_the_choices():
    model, x, y = _model_and_batch()
    with pytest.raises(ValueError, match="CUDA"):
        measure_precision(model, x, y, "tf32", repeat=1)
    with pytest.raises(ValueError, match="one of"):
        measure_precision(model, x, y, "fp8", repeat=1)


def test_the_tf32_flag_is_restored():
    model, x, y = _model_and_batch()
    before = torch.backends.cuda.matmul.allow_tf32
    measure_precision(model, x, y, "fp32", repeat=1)
    assert torch.backends.cuda.matmul.allow_tf32 == before

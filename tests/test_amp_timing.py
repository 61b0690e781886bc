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


def test_a_cpu_run_leaves_every_tf32_switch_alone():
    from autograd_lab.labs.precision import tf32_settings
    model, x, y = _model_and_batch()
    before = tf32_settings()            # with torch's newer fp32_precision switch, where it has one
    measure_precision(model, x, y, "fp32", repeat=1)
    assert tf32_settings() == before


# --- what the CPU can do in 16 bits, host reads, and what a GPU promises ------------------------------

import math

from autograd_lab.labs import amp_timing


def test_cpu_16bit_units_names_the_capability_and_each_dtypes_matmul_path():
    units = amp_timing.cpu_16bit_units()
    assert units["capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(units["matmul_path"]) == set(units["onednn"]) == {"bfloat16", "float16"}
    assert units["onednn"]["bfloat16"] == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    for path in units["matmul_path"].values():
        assert path in ("oneDNN", "generic", None)


def test_the_matmul_path_follows_onednns_check_per_dtype(monkeypatch):
    # an AVX512 CPU without BF16 (oneDNN takes bfloat16, not float16), an AVX2 CPU, and an ARM one
    monkeypatch.setattr(amp_timing, "_onednn_supports", lambda tag: tag == "bf16")
    monkeypatch.setattr(amp_timing.platform, "machine", lambda: "x86_64")
    if torch.backends.mkldnn.is_available():
        assert amp_timing.cpu_16bit_units()["matmul_path"] == {"bfloat16": "oneDNN", "float16": "generic"}
    with torch.backends.mkldnn.flags(enabled=False):
        assert amp_timing.cpu_16bit_units()["matmul_path"] == {"bfloat16": "generic", "float16": "generic"}
    monkeypatch.setattr(amp_timing, "_onednn_supports", lambda tag: False)
    assert amp_timing.cpu_16bit_units()["matmul_path"] == {"bfloat16": "generic", "float16": "generic"}
    monkeypatch.setattr(amp_timing.platform, "machine", lambda: "aarch64")
    assert amp_timing.cpu_16bit_units()["matmul_path"] == {"bfloat16": None, "float16": None}


def test_matmul_throughput_reports_every_dtype_and_the_casts():
    rates = amp_timing.matmul_throughput(rows=8, features=32, repeat=1)
    assert set(rates) == {"float32", "bfloat16", "float16"}
    assert rates["float32"].cast_seconds == 0.0
    assert all(rate.gflops > 0 and rate.linear_seconds > 0 for rate in rates.values())


def test_count_item_calls_counts_and_restores():
    original = torch.Tensor.item
    with amp_timing.count_item_calls() as reads:
        torch.tensor(1.0).item()
        torch.tensor(2.0).item()
    assert reads.count == 2 and torch.Tensor.item is original


def test_a_default_optimizer_reads_the_inf_flag_once_and_a_fused_one_never():
    for fused, reads_expected, steps_expected in ((False, 1, 0), (True, 0, 1)):
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=fused)
        ran = []
        optimizer.register_step_post_hook(lambda *args: ran.append(1))
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(model(torch.randn(8, 4)).sum()).backward()
        model.weight.grad[0, 0] = math.inf
        before = model.weight.detach().clone()
        with amp_timing.count_item_calls() as reads:
            scaler.step(optimizer)
        assert (reads.count, len(ran)) == (reads_expected, steps_expected)
        assert torch.equal(before, model.weight)


def _facts(capability, fp16=2.0, bf16=None, tf32=1.0, forced=0.0, weights=1.05, activations=0.55):
    facts = {"compute_capability": capability, "tf32_forced": forced, "fp16_speedup_over_strict_fp32": fp16,
             "tf32_speedup_over_strict_fp32": tf32, "fp16_peak_over_fp32_weights": weights,
             "fp16_peak_over_fp32_activations": activations}
    if bf16 is not None:
        facts["bf16_speedup_over_strict_fp32"] = bf16
    return facts


@pytest.mark.parametrize("gpu,facts,speed_claims", [
    ("T4 (7.5, no bf16 tensor cores)", _facts(7.5, fp16=1.9, tf32=1.0), {"fp16"}),
    ("V100 (7.0)", _facts(7.0, fp16=2.2, tf32=1.0), {"fp16"}),
    ("A100 (8.0)", _facts(8.0, fp16=3.5, bf16=3.5, tf32=2.5), {"fp16", "bf16", "tf32"}),
    ("H100 (9.0)", _facts(9.0, fp16=2.3, bf16=2.3, tf32=2.0), {"fp16", "bf16", "tf32"}),
    # the fp32 row sets allow_tf32 off, which wins over the override: strict there too
    ("H100 in an NGC container", _facts(9.0, fp16=2.3, bf16=2.3, tf32=2.0, forced=1.0), {"fp16", "bf16", "tf32"}),
    ("P100 (6.0, no tensor cores)", _facts(6.0, fp16=1.0, tf32=1.0), set()),
])
def test_gpu_expectations_assert_only_what_the_device_has_units_for(gpu, facts, speed_claims):
    claims = amp_timing.gpu_expectations(facts)
    asserted_speed = {mode for mode in amp_timing.TENSOR_CORES if any(f"): {mode} beats" in c for c in claims)}
    assert asserted_speed == speed_claims, gpu
    assert all(claims.values()), gpu            # the plausible figures above pass on each device
    assert len(claims) == 2 + len(speed_claims)


@pytest.mark.parametrize("enabled", [False, True])
def test_matmul_tf32_leaves_every_switch_as_it_found_it(enabled):
    # from torch 2.9 writing allow_tf32 moves matmul.fp32_precision for good; the block writes it back too
    from autograd_lab.labs.precision import tf32_settings
    before = tf32_settings()
    with amp_timing._matmul_tf32(enabled):
        assert torch.backends.cuda.matmul.allow_tf32 is enabled
    assert tf32_settings() == before

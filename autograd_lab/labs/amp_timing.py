"""What mixed precision costs and gains on the machine at hand: step time, memory, 16-bit matmul units, host reads.

The modes are the four ways to run a matmul-heavy model:

* ``fp32``: plain float32 (TF32 set off for the row, so CUDA matmuls are true float32, also
  where ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` makes TF32 the default: the variable sets only the default);
* ``tf32``: float32 tensors, TF32 tensor-core matmuls (CUDA only);
* ``bf16``: autocast to bfloat16, no loss scaling;
* ``fp16``: autocast to float16 with a ``GradScaler``.

``measure_precision`` returns one ``PrecisionRow``. ``saved_bytes`` (what
autograd keeps for backward) is exact and the same on every run; the time
varies, and ``peak_bytes`` exists only on CUDA.

Why a CPU runs 16-bit matmuls slowly or fast: ``cpu_16bit_units`` says which 16-bit
matrix instructions this CPU has and, per dtype, whether PyTorch sends a 16-bit matmul to
oneDNN or to its generic kernel; ``matmul_throughput`` measures each dtype's
``F.linear`` (and what casting the operands costs).  On a GPU, ``gpu_precision_table``
measures the four modes and ``gpu_expectations`` says which gains the device's
compute capability promises, so the notebook asserts only those.

``count_item_calls`` counts ``Tensor.item()`` calls: on a GPU each one makes the CPU
wait for the GPU, and counting them works on a CPU too.
"""

import contextlib
import platform
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autograd_lab.labs.gpu_records import Table, measurement
from autograd_lab.labs.memory import saved_tensors
from autograd_lab.labs.precision import tf32_forced
from autograd_lab.labs.timing import time_it

MODES = ("fp32", "tf32", "bf16", "fp16")
_AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class PrecisionRow:
    mode: str
    seconds: float          # median step time (varies between runs)
    samples_per_s: float
    saved_bytes: int        # activations saved for backward in one forward
    peak_bytes: int | None  # torch.cuda.max_memory_allocated during the steps; None on CPU


def _check_mode(mode, device):
    if mode not in MODES:
        raise ValueError(f"unknown precision mode {mode!r}; use one of {MODES}.")
    if mode == "tf32" and torch.device(device).type != "cuda":
        raise ValueError("tf32 is a CUDA tensor-core mode; on CPU measure fp32, bf16 and fp16 only.")


def _loss(model, x, y, mode, device):
    dtype = _AUTOCAST_DTYPE[mode]
    # autocast covers the forward pass and the loss only; backward runs outside it
    with torch.autocast(torch.device(device).type, dtype=dtype or torch.float32, enabled=dtype is not None):
        return F.cross_entropy(model(x), y)


def _step(model, optimizer, scaler, x, y, mode, device):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_loss(model, x, y, mode, device)).backward()
    scaler.step(optimizer)
    scaler.update()


@contextlib.contextmanager
def _matmul_tf32(enabled):
    """Set ``torch.backends.cuda.matmul.allow_tf32`` inside the block; afterwards every switch reads as before.

    From torch 2.9, writing ``allow_tf32`` also moves the newer ``matmul.fp32_precision`` switch (from
    "none" to "ieee" or "tf32"), and writing ``allow_tf32`` back does not undo that: so that switch is
    saved and written back too, where this torch has it.
    """
    matmul = torch.backends.cuda.matmul
    previous_tf32 = matmul.allow_tf32
    previous_precision = getattr(matmul, "fp32_precision", None)
    matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32 = previous_tf32
        if previous_precision is not None:
            matmul.fp32_precision = previous_precision


def measure_precision(model, x, y, mode, *, repeat=5, device="cpu"):
    """Time one SGD training step of ``model`` on ``(x, y)`` in ``mode``; parameters stay float32."""
    _check_mode(mode, device)
    is_cuda = torch.device(device).type == "cuda"
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=mode == "fp16")
    with saved_tensors(exclude=model.parameters()) as saved:
        _loss(model, x, y, mode, device)
    # TF32 is a CUDA switch: a CPU run leaves it alone.  The fp32 row sets it off, so it is strict float32
    # even where TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 made TF32 the default (the variable sets only the default).
    with _matmul_tf32(mode == "tf32") if is_cuda else contextlib.nullcontext():
        if is_cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        seconds = time_it(lambda: _step(model, optimizer, scaler, x, y, mode, device),
                          repeat=repeat, device=device)
        peak = torch.cuda.max_memory_allocated(device) if is_cuda else None
    return PrecisionRow(mode, seconds, x.shape[0] / seconds, saved.nbytes, peak)


# --- on a CPU: which 16-bit matmul units there are, and what each dtype's matmul costs ------------

def _probe(name):
    """``torch.cpu._is_<name>_supported()`` where this torch has it (private, so never required), else None."""
    function = getattr(torch.cpu, f"_is_{name}_supported", None)
    try:
        return bool(function()) if function is not None else None
    except RuntimeError:
        return None


def _onednn_supports(tag):
    """oneDNN's own check for dtype ``tag`` ("bf16", "fp16") on this CPU, the one PyTorch's CPU matmul
    consults (``torch.ops.mkldnn._is_mkldnn_<tag>_supported()``, private, so None where it is missing)."""
    try:
        return bool(getattr(torch.ops.mkldnn, f"_is_mkldnn_{tag}_supported")())
    except (AttributeError, RuntimeError):
        return None


def _matmul_path(x86, onednn):
    """Where a CPU matmul of one 16-bit dtype goes: "oneDNN", "generic", or None when this helper cannot tell."""
    if onednn and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled:
        return "oneDNN"
    if x86 and onednn is not None:
        return "generic"   # ATen's own gemm for reduced floating types, accumulating in float32
    return None


def cpu_16bit_units():
    """This CPU's vector capability, its 16-bit matrix instructions, and where each 16-bit dtype's matmul goes.

    ``capability`` is what ``torch.backends.cpu.get_cpu_capability()`` reports (the widest
    vector instructions PyTorch's kernels use here).  ``avx512_bf16`` and ``amx`` (AMX-BF16
    tiles) multiply bfloat16 only; ``amx_fp16`` multiplies float16 (None: this torch cannot
    tell; AVX512-FP16 has no probe in ``torch.cpu``).  ``onednn`` is oneDNN's own support check
    per dtype (on x86: bfloat16 from AVX512 BW/VL/DQ or AVX-NE-CONVERT, float16 from AVX512-FP16
    or AVX-NE-CONVERT; a CPU without 16-bit arithmetic converts inside oneDNN's kernels).
    ``matmul_path`` says, per dtype, where PyTorch sends a large enough 2-D matmul: "oneDNN"
    when oneDNN supports the dtype here and is enabled, "generic" on an x86 CPU where it does
    not, None on other processors, which this helper does not judge.
    """
    units = {"machine": platform.machine(), "capability": torch.backends.cpu.get_cpu_capability(),
             "avx512_bf16": _probe("avx512_bf16"), "amx": _probe("amx_tile"), "amx_fp16": _probe("amx_fp16"),
             "onednn": {"bfloat16": _onednn_supports("bf16"), "float16": _onednn_supports("fp16")}}
    x86 = units["machine"].lower() in ("x86_64", "amd64", "i386", "i686")
    units["matmul_path"] = {name: _matmul_path(x86, supported) for name, supported in units["onednn"].items()}
    return units


@dataclass(frozen=True)
class MatmulRate:
    dtype: str
    gflops: float         # F.linear throughput, from the fastest of `repeat` timings
    cast_seconds: float   # casting both float32 operands to this dtype (0 for float32)
    linear_seconds: float


def matmul_throughput(dtypes=(torch.float32, torch.bfloat16, torch.float16), *, rows=64, features=512,
                      repeat=5):
    """``F.linear(x, w)`` of a ``rows x features`` batch and a square weight, per dtype, on the CPU.

    Also times the cast of both float32 operands to the dtype, which is what autocast
    adds in front of each 16-bit matmul.  The dtypes take turns within each repetition
    and each gets the fastest of its ``repeat`` timings: on a shared machine load can only
    slow a timing down, and it slows a 1 ms float32 matmul relatively more than a slow
    16-bit one, so a median under load can close the very gap being measured.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=generator)
    w = torch.randn(features, features, generator=generator)
    operands = {dtype: (x.to(dtype), w.to(dtype)) for dtype in dtypes}
    linear, cast = {dtype: [] for dtype in dtypes}, {dtype: [] for dtype in dtypes}
    for _ in range(repeat):
        for dtype in dtypes:
            linear[dtype].append(time_it(lambda: F.linear(*operands[dtype]), repeat=1))
            if dtype != torch.float32:
                cast[dtype].append(time_it(lambda: (x.to(dtype), w.to(dtype)), repeat=1))
    flops = 2 * rows * features * features
    rates = {}
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        seconds = min(linear[dtype])
        rates[name] = MatmulRate(name, flops / seconds / 1e9, min(cast[dtype] or [0.0]), seconds)
    return rates


# --- host reads: what makes the CPU wait for the GPU ----------------------------------------------

class _ItemCounter:
    count = 0


@contextlib.contextmanager
def count_item_calls():
    """Count ``Tensor.item()`` calls inside the block (on a GPU, each one waits for the GPU).

    ``with count_item_calls() as reads: scaler.step(optimizer)`` then ``reads.count``.
    The count includes calls that raise (under ``torch.cuda.set_sync_debug_mode("error")``).
    """
    counter = _ItemCounter()
    original = torch.Tensor.item

    def item(tensor):
        counter.count += 1
        return original(tensor)

    torch.Tensor.item = item
    try:
        yield counter
    finally:
        torch.Tensor.item = original


# --- on a GPU: the table notebook 05 shows, and benchmarks/gpu_record.py records ----------------

GPU_CASES = {   # (width, depth, batch): where AMP's memory saving depends on what dominates
    "weights dominate": (4096, 6, 256),
    "activations dominate": (1024, 6, 32768),
}
MIN_GAIN = 1.2   # "faster" on a GPU that has the units: a margin that a shared GPU still clears
TENSOR_CORES = {"fp16": 7.0, "bf16": 8.0, "tf32": 8.0}   # first compute capability with those tensor cores


def _gpu_mlp(width, depth, device):
    layers = [m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)


def gpu_modes(device):
    """The modes this GPU can run: bfloat16 only where it has bfloat16 arithmetic, not emulation."""
    native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return tuple(mode for mode in MODES if mode != "bf16" or native_bf16)


@measurement("amp_precisions")
def gpu_precision_table(device, runs=5, repeat=5):
    """Strict fp32, TF32, bf16 (where supported) and fp16 on a matmul-heavy MLP, in both memory cases.

    Each mode is measured ``runs`` times (each the median of ``repeat`` steps), so
    the table gives the median step time and its spread over runs: one run cannot
    rank bf16 against fp16.  ``facts`` holds the device's compute capability, each
    mode's speed-up over strict fp32 (activations case, where the matmuls dominate) and float16's peak over
    float32's in both cases; ``gpu_expectations(facts)`` says which of them to assert.
    """
    major, minor = torch.cuda.get_device_capability(device)
    modes = gpu_modes(device)
    rows, medians = [], {}
    for case, (width, depth, batch) in GPU_CASES.items():
        torch.manual_seed(0)
        model = _gpu_mlp(width, depth, device)
        x = torch.randn(batch, width, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        for mode in modes:
            measured = [measure_precision(model, x, y, mode, repeat=repeat, device=device) for _ in range(runs)]
            times = sorted(row.seconds for row in measured)
            median = times[len(times) // 2]
            peak = max(row.peak_bytes for row in measured)
            medians[case, mode] = (median, peak)
            rows.append([case, mode, median * 1e3, (times[-1] - times[0]) / median * 100, peak / 2**20])
        del model, x, y
        torch.cuda.empty_cache()
    facts = {"compute_capability": major + minor / 10, "tf32_forced": float(tf32_forced())}
    # Speed is judged where the matmuls dominate the step (batch 32768): with a batch of 256 an H100 spends
    # most of a step outside the matmuls, and float16 beat strict float32 by 1.06x in one run, 1.31x in another.
    for mode in modes[1:]:
        facts[f"{mode}_speedup_over_strict_fp32"] = _ratio(medians, "activations dominate", "fp32", mode, 0)
    facts["fp16_peak_over_fp32_weights"] = _ratio(medians, "weights dominate", "fp16", "fp32", 1)
    facts["fp16_peak_over_fp32_activations"] = _ratio(medians, "activations dominate", "fp16", "fp32", 1)
    return Table(
        columns=["case", "mode", "median step ms", "spread %", "peak MiB"], rows=rows, facts=facts,
        note=f"{runs} runs of {repeat} timed steps per mode; spread = (slowest - fastest) / median.")


def _ratio(medians, case, top, bottom, index):
    return medians[case, top][index] / medians[case, bottom][index]


def gpu_expectations(facts):
    """``{claim: holds}`` for what the measured GPU promises, judged from its own capability.

    Memory: 16-bit weight copies cancel the saving when weights dominate; halved
    activations dominate the peak when activations do (every GPU).  Speed: a mode
    beats strict float32 by ``MIN_GAIN`` only on a GPU with tensor cores for it
    (``TENSOR_CORES``: float16 from compute capability 7.0, bfloat16 and TF32 from
    8.0).  Strict float32 is strict also where ``tf32_forced``: ``measure_precision`` sets
    ``allow_tf32`` off for that row, which wins over the override (the variable sets only the default).
    """
    claims = {
        "weights dominate: float16's peak is above 0.9 of float32's (16-bit weight copies)":
            facts["fp16_peak_over_fp32_weights"] > 0.9,
        "activations dominate: float16's peak is below 0.75 of float32's (halved activations)":
            facts["fp16_peak_over_fp32_activations"] < 0.75,
    }
    for mode, first in TENSOR_CORES.items():
        ratio = facts.get(f"{mode}_speedup_over_strict_fp32")
        if ratio is not None and facts["compute_capability"] >= first:
            claims[f"activations dominate (the matmuls do): {mode} beats strict float32 by {MIN_GAIN}x "
                   f"(tensor cores from compute capability {first})"] = \
                ratio > MIN_GAIN
    return claims

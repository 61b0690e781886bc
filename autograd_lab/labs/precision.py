"""Where low-precision floats run out, measured on real values.

Mixed precision fails in two directions: small gradients *flush to zero*
below a format's smallest subnormal, and large ones *overflow to inf* above
its maximum. Loss scaling multiplies everything by one factor to move the
values between the two limits. ``cast_fate`` counts what a cast would do::

    fate = cast_fate(grads, torch.float16, scale=2.0 ** 10)
    fate.flushed_fraction, fate.overflow_fraction

Note that ``torch.finfo(dtype).tiny`` is the smallest *normal* number; the
smallest subnormal, where values really become zero, is ``tiny * eps``.

TF32, the third format of mixed-precision talk, is a switch rather than a dtype:
``tf32_settings()`` reads the switches (the newer ``fp32_precision`` one too, where torch has it), and ``tf32_defaults()`` says what they are
before a program touches them, which depends on the environment
(``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, set by NVIDIA's NGC containers, turns TF32
on for float32 matmuls).
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import torch

from autograd_lab import versions

TF32_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def tf32_forced(environ=None):
    """Whether the environment turns TF32 on for float32 matmuls: ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``.

    Only the value ``1`` counts (``true``, ``ON`` and ``yes`` leave the defaults alone,
    measured on torch 2.5.1, 2.13.0 and 2.15.0).  torch reads the variable when it is
    imported, so setting it later in the same process changes nothing.
    """
    return (os.environ if environ is None else environ).get(TF32_OVERRIDE) == "1"


def tf32_defaults(environ=None):
    """The TF32 switches as torch reports them before a program sets them, in this environment."""
    forced = tf32_forced(environ)
    defaults = {"float32_matmul_precision": "high" if forced else "highest",
                "matmul_allow_tf32": forced,
                "cudnn_allow_tf32": True}   # convolutions: on by default, whatever the environment
    if versions.behaviour("fp32_precision_switch").value:
        defaults["matmul_fp32_precision"] = "tf32" if forced else "none"
    return defaults


def tf32_settings():
    """The TF32 switches as torch reports them now (readable without a GPU), the newer
    ``fp32_precision`` one included where this torch has it (``versions``: "fp32_precision_switch")."""
    settings = {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    if versions.behaviour("fp32_precision_switch").value:
        settings["matmul_fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
    return settings


def tf32_settings_in_new_process(environ, *, set_strict=False):
    """``tf32_settings()`` as a new Python process sees them with ``environ`` added to this one's environment.

    torch reads ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` when it is imported, so only a new process shows its effect.
    With ``set_strict`` the process first sets ``torch.backends.cuda.matmul.allow_tf32 = False`` itself.
    """
    strict = "import torch; torch.backends.cuda.matmul.allow_tf32 = False; " if set_strict else ""
    script = (f"import json; {strict}from autograd_lab.labs.precision import tf32_settings; "
              "print(json.dumps(tf32_settings()))")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **environ},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def autocast_registered(op, device_type):
    """Whether autocast has a rule for the aten operator ``op`` (``"cat"``, ``"softmax.int"``) on ``device_type``.

    Read from the dispatcher's registrations (``AutocastCPU``, ``AutocastCUDA``), which a CPU-only
    torch holds for every device, so CUDA's lists can be inspected without a GPU.  A registered op
    is on one of that device's lists (low precision, float32 or promote) or, on CUDA, banned
    (``binary_cross_entropy`` raises rather than casting); the registration does not say which,
    running the op under autocast does.  An op with no rule gets no casting at all.
    """
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", f"Autocast{device_type.upper()}")


def smallest_subnormal(dtype):
    """The smallest positive value ``dtype`` can hold: ``finfo.tiny * finfo.eps`` (2^-24 for float16)."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


@dataclass(frozen=True)
class CastFate:
    """What casting ``total`` values (times ``scale``) to ``dtype`` does to them."""

    dtype: torch.dtype
    scale: float
    total: int
    zeros: int       # already exactly zero before the cast: nothing to lose
    flushed: int     # non-zero before, zero after: information lost to underflow
    overflowed: int  # finite before, inf after

    @property
    def flushed_fraction(self):
        return self.flushed / self.total

    @property
    def overflow_fraction(self):
        return self.overflowed / self.total

    @property
    def zero_fraction(self):
        return self.zeros / self.total


def _as_flat_float32(values):
    if torch.is_tensor(values):
        values = [values]
    tensors = [v.detach().reshape(-1).to(torch.float32) for v in values if v is not None]
    if not tensors:
        raise ValueError("cast_fate needs at least one tensor of values (got none): pass the gradients to count.")
    return torch.cat(tensors)


def cast_fate(values, dtype=torch.float16, scale=1.0):
    """Count the values that would flush to zero or overflow when ``values * scale`` is cast to ``dtype``.

    ``values``: a tensor or an iterable of tensors (``None`` entries, such as
    missing gradients, are skipped). The product is taken in float64 so that
    the scaling itself never rounds.
    """
    if torch.finfo(dtype).bits >= 32:
        raise ValueError(f"cast_fate compares against a low-precision format; got {dtype}. Use torch.float16 or torch.bfloat16.")
    if not scale > 0:
        raise ValueError(f"scale must be a positive number, got {scale!r}.")
    flat = _as_flat_float32(values).to(torch.float64)
    scaled = flat * scale
    cast = scaled.to(dtype)
    return CastFate(
        dtype=dtype,
        scale=float(scale),
        total=flat.numel(),
        zeros=int((flat == 0).sum()),
        flushed=int(((cast == 0) & (flat != 0)).sum()),
        overflowed=int((cast.isinf() & scaled.isfinite()).sum()),
    )


def losses_in_token_dtype(micro_batch_losses, token_losses, masks):
    """``micro_batch_losses(token_losses, masks)``, each loss a wider float (float64 sums) cast to its micro-batch's
    token-loss dtype, for the grader (03.micro_batch_losses).

    The prompt asks for one scalar tensor per micro-batch and no dtype: a sum accumulated in float64 is a correct
    style (adversarial round 9, adv-00-04-r8 F8), and the gradient that reaches the token losses is theirs either
    way. The cast is differentiable, so the gradient is still compared; a narrower float is left as it is.
    """
    losses = micro_batch_losses(token_losses, masks)
    if not isinstance(losses, (list, tuple)):
        return losses
    cast = []
    for loss, tokens in zip(losses, token_losses):
        if (torch.is_tensor(loss) and torch.is_tensor(tokens) and loss.is_floating_point()
                and tokens.is_floating_point() and torch.finfo(loss.dtype).bits > torch.finfo(tokens.dtype).bits):
            loss = loss.to(tokens.dtype)
        cast.append(loss)
    return type(losses)(cast) if isinstance(losses, tuple) else cast + list(losses[len(cast):])

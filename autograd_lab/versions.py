"""Every behaviour of PyTorch that the course teaches and that differs between releases.

The course supports a range of torch releases (``SUPPORTED``).  Where releases in
that range behave differently, the difference lives here, once, as a ``Behaviour``:
what each variant is and the first release that has it.  Notebooks then

* assert what the installed torch does: ``behaviour("...").value``;
* say what other releases do, in prose generated from here: ``.explain()``;
* accept every variant of an error message: ``error_starts("...")`` for
  ``expect_error``;
* skip a feature the installed torch lacks with one line: ``requires("...")``.

A variant's ``since`` is the first release measured to have it (``docs/compatibility.md``
records the matrix that checks these boundaries).  This module imports torch only to
read its version, and ``parse``/``SUPPORTED`` work without torch, for ``doctor``.
"""

import re
import warnings
from dataclasses import dataclass
from typing import Any

# The tested range: the oldest and the newest release CI runs, plus the pinned reference.
# pyproject.toml's torch range must say the same (tests/test_versions.py checks it).
OLDEST = "2.5.1"
NEWEST = "2.15.0"
PINNED = "2.13.0"
SUPPORTED = (">=2.5", "<2.16")   # as written in pyproject.toml


def parse(version):
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; local labels and pre-release tags are ignored."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(version))
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def installed():
    """The installed torch's version as a string without its local label (``"2.13.0"``)."""
    import torch
    return ".".join(map(str, parse(torch.__version__)))


def in_supported_range(version):
    low, high = (parse(bound.lstrip("<>=")) for bound in SUPPORTED)
    return low <= parse(version) < high


@dataclass(frozen=True)
class Variant:
    since: str   # first release with this variant ("0" for "every release before the next")
    value: Any   # what a cell asserts (a count, a flag, a message start)
    says: str    # the behaviour in words, to complete "torch X ..."


@dataclass(frozen=True)
class Behaviour:
    name: str
    topic: str
    variants: tuple   # oldest first

    def variant_for(self, version):
        chosen = self.variants[0]
        for variant in self.variants:
            if parse(version) >= parse(variant.since):
                chosen = variant
        return chosen

    @property
    def current(self):
        return self.variant_for(installed())

    @property
    def value(self):
        return self.current.value

    @property
    def values(self):
        return tuple(variant.value for variant in self.variants)

    def explain(self):
        """One paragraph: what the installed torch does, then what the other releases do."""
        mine = installed()
        current = self.variant_for(mine)
        others = [v for v in self.variants if v is not current]
        text = f"Your torch {mine} {current.says}."
        for other in others:
            if parse(other.since) > parse(mine):
                text += f" From torch {other.since}, it {other.says}."
            else:
                text += f" Before torch {_next_since(self.variants, other)}, it {other.says}."
        return text


def _next_since(variants, variant):
    index = variants.index(variant)
    return variants[index + 1].since


_BEHAVIOURS = (
    Behaviour("unused_input_message", "autograd.grad with an input the output does not use", (
        Variant("0", "One of the differentiated Tensors appears to not have been used in the graph",
                "says \"One of the differentiated Tensors appears to not have been used in the graph\""),
        Variant("2.13.0", "The differentiated Tensor at index",
                "says \"The differentiated Tensor at index N appears to not have been used in the graph\", "
                "N being the position of the first unused input"),
    )),
    Behaviour("version_error_names", "how the in-place (version counter) error names the op behind a saved tensor", (
        Variant("0", "{op}Backward0", "names its autograd node (\"output 0 of SigmoidBackward0\")"),
        Variant("2.13.0", "{op}", "names the op itself (\"output 0 of Sigmoid\")"),
    )),
    Behaviour("checkpoint_saved_tensors", "tensors a non-reentrant checkpoint segment saves", (
        Variant("0", 2, "saves an empty placeholder tensor of shape (0,) plus the segment input"),
        Variant("2.12.0", 1, "saves only the segment input"),
    )),
    Behaviour("checkpoint_reentrant_deadline", "the warning of checkpoint called without use_reentrant", (
        # Boundaries read from torch/utils/checkpoint.py of the released wheels: "In version 2.5" in 2.6.0, 2.7.1
        # and 2.8.0; "Starting in PyTorch 2.9" in 2.9.0 to 2.14.0 (2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.1, 2.14.0
        # read; 2.11.0 also run on a GPU machine); "In a future release" in 2.15.0.
        Variant("0", "In version 2.5", "says \"In version 2.5 we will raise an exception if use_reentrant is not "
                "passed\" (measured on 2.5.1, which does not raise)"),
        Variant("2.9.0", "Starting in PyTorch 2.9", "says \"Starting in PyTorch 2.9, calling checkpoint without "
                "use_reentrant will raise an exception\" (measured on 2.13.0, which does not raise)"),
        Variant("2.15.0", "In a future release", "says \"In a future release, calling checkpoint without "
                "use_reentrant will raise an exception\""),
    )),
    Behaviour("selective_checkpointing", "CheckpointPolicy and create_selective_checkpoint_contexts", (
        Variant("0", False, "has no selective checkpointing API"),
        Variant("2.5.0", True, "has CheckpointPolicy and create_selective_checkpoint_contexts"),
    )),
    Behaviour("sac_outer_hooks_warning", "saved-tensor hooks (save_on_cpu, saved_tensors) around a selective checkpoint", (
        # measured: no warning on 2.5.1 and 2.13.0, the FutureWarning on 2.15.0, whose checkpoint() also takes
        # respect_saved_tensors_hooks= (2.14 not run)
        Variant("0", None, "lets the tensors a selective policy keeps bypass the outer hooks, without a warning"),
        Variant("2.15.0", "A saved_tensors_hooks context (e.g. save_on_cpu) is active around a selective activation "
                "checkpoint region", "warns (FutureWarning) that the tensors a selective policy keeps bypass the "
                "outer hooks for now, and that `checkpoint(..., respect_saved_tensors_hooks=True|False)` chooses"),
    )),
    Behaviour("ddp_forward_sync_buffers", "DDP's forward_sync_buffers parameter", (
        Variant("0", False, "controls the copy of rank 0's buffers before a forward (train or eval) that follows "
                "a grad-enabled forward outside no_sync() with broadcast_buffers (default True)"),
        Variant("2.13.0", True, "controls the copy of rank 0's buffers before a forward (train or eval) that "
                "follows a grad-enabled forward outside no_sync() with forward_sync_buffers (on by default), which "
                "replaces the deprecated broadcast_buffers"),
    )),
    Behaviour("cuda_amp_spelling", "the torch.cuda.amp spelling of autocast, GradScaler and custom_fwd/custom_bwd", (
        # 2.3.1's torch/cuda/amp sources have no deprecation, 2.4.0's do (read from the released wheels);
        # the warning itself measured on 2.5.1, 2.13.0 and 2.15.0
        Variant("0", None, "accepts `torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)` and "
                "`torch.cuda.amp.custom_fwd(...)` without a warning"),
        Variant("2.4.0", "`torch.cuda.amp.{}(args...)` is deprecated",
                "warns (FutureWarning) that `torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)` and "
                "`torch.cuda.amp.custom_fwd(...)` are deprecated, naming their `torch.amp` replacement"),
    )),
    Behaviour("full_backward_hook_output_warning",
              "a full backward hook on a module none of whose inputs requires grad (the first layer)", (
        # The warning is in torch/utils/hooks.py of the 2.8.0 wheel, not of 2.7.1's (read from the released
        # wheels); measured: no warning on 2.5.1, the warning on 2.13.0 and 2.15.0.
        Variant("0", None, "calls the hook without a warning"),
        Variant("2.8.0", "Full backward hook is firing when gradients are computed with respect to module outputs",
                "warns \"Full backward hook is firing when gradients are computed with respect to module outputs "
                "since no inputs require gradients\""),
    )),
    Behaviour("fp32_precision_switch", "the fp32_precision switches beside allow_tf32 and set_float32_matmul_precision", (
        # PyTorch 2.9's CUDA notes document them (the 2.8 wheel not read here); measured: absent on 2.5.1,
        # present on 2.13.0 and 2.15.0 ("none" by default, "tf32" for matmuls under TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1)
        Variant("0", False, "sets TF32 with `torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32` "
                "and `torch.set_float32_matmul_precision`"),
        Variant("2.9.0", True, "also has `torch.backends.cuda.matmul.fp32_precision` (and `torch.backends.fp32_precision`, "
                "`torch.backends.cudnn.fp32_precision`), the newer switches"),
    )),
    Behaviour("get_total_norm", "torch.nn.utils.get_total_norm, the total gradient norm without clipping", (
        # Added in the 2.6.0 release (its release notes); measured: absent on 2.5.1, present on 2.13.0 and 2.15.0.
        Variant("0", False, "has no `torch.nn.utils.get_total_norm`: compute the total norm by hand"),
        Variant("2.6.0", True, "has `torch.nn.utils.get_total_norm`, which computes the total norm and leaves the "
                "gradients as they are"),
    )),
    Behaviour("jvp_jit_warning", "a FutureWarning about torch.jit.script on the first torch.func.jvp call", (
        Variant("0", False, "prints no warning on the first torch.func.jvp call"),
        Variant("2.14.0", True, "prints a FutureWarning about torch.jit.script on the first torch.func.jvp call"),
    )),
    Behaviour("clamp_grad_at_bound", "the gradient of torch.clamp at a point equal to its bound", (
        # measured with clamp(min=0), clamp(max=0) and clamp_min(0) at 0: 1 on 2.5.1, 2.12.1 and 2.13.0,
        # 0 on 2.14.0, 2.14.1 and 2.15.0. A tensor bound (min=torch.zeros(()), also max= and clamp_min) gives 1
        # on 2.5.1 and 2.13.0 but 0.5 on 2.14.0, 2.14.1 and 2.15.0: the variants speak of a number as the bound.
        Variant("0", 1.0, "gives `torch.clamp(z, min=0)` (a number as the bound) the gradient 1 at z = 0: "
                          "the bound counts as inside"),
        Variant("2.14.0", 0.0, "gives `torch.clamp(z, min=0)` (a number as the bound) the gradient 0 at z = 0: "
                               "the bound counts as outside"),
    )),
)
BEHAVIOURS = {behaviour.name: behaviour for behaviour in _BEHAVIOURS}


def behaviour(name):
    return BEHAVIOURS[name]


def error_starts(name):
    """Every variant's message start, for ``expect_error(..., error_starts(name))``."""
    return behaviour(name).values


class expected_warning:
    """``with expected_warning("name"):`` the block warns exactly as the installed torch's variant says.

    For a ``Behaviour`` whose value is a warning's start (or ``None``: no warning): the block
    must raise a warning starting with it, and none starting with another variant's value.
    The warning is printed (``.message``); other warnings are kept in ``.others``.
    """

    def __init__(self, name):
        self.behaviour = behaviour(name)
        self.message, self.others, self.category = None, [], None

    def __enter__(self):
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, exc_type, exc, tb):
        self._catcher.__exit__(exc_type, exc, tb)
        if exc is not None:
            return False
        starts = [value for value in self.behaviour.values if value]
        matched = [w for w in self._caught if any(str(w.message).startswith(s) for s in starts)]
        ours = [str(w.message) for w in matched]
        self.others = [str(w.message) for w in self._caught if str(w.message) not in ours]
        wanted = self.behaviour.value
        if wanted is None and ours:
            raise AssertionError(f"torch {installed()} was not expected to warn here ({self.behaviour.name}), "
                                 f"but it warned: {ours[0][:200]}. Update versions.py.")
        if wanted is not None and not any(message.startswith(wanted) for message in ours):
            raise AssertionError(f"torch {installed()} was expected to warn {wanted!r} here "
                                 f"({self.behaviour.name}), but it did not. Update versions.py.")
        if ours:
            self.message = ours[0].split(". See ")[0]
            self.category = matched[0].category      # a deprecation is a FutureWarning on newer releases
            print(f"{self.category.__name__} (expected on torch {installed()}): {self.message}")
        return False


def requires(name, feature=None):
    """True when the installed torch has ``name``; else print one line saying so and return False.

    ``if requires("selective_checkpointing"): ...`` keeps a notebook running on an older torch.
    """
    b = behaviour(name)
    if b.value:
        return True
    first = next(v.since for v in b.variants if v.value)
    print(f"Skipped: {feature or b.topic} needs torch >= {first}; you have {installed()}.")
    return False


def quiet_untaught_warnings():
    """Hide torch's own deprecation warnings that the course does not teach.

    Each filter is narrow (category, message start and module) and says which
    release needs it, so a new warning is never hidden by accident.
    """
    # torch >= 2.14: the first torch.func.jvp call warns that torch.jit.script is deprecated.
    warnings.filterwarnings("ignore", category=FutureWarning, message=r"`?torch\.jit\.script`? is deprecated")
    # torch 2.13: the same warning is a DeprecationWarning (visible under -W default or when run from __main__).
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=r"`?torch\.jit\.script`? is deprecated")
    # every release: the first torch.cuda.set_sync_debug_mode call of a process warns that the mode is a
    # prototype (a C++ warn-once, so a second call, or a re-run cell, never sees it); notebook 05 says so in prose.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.cuda\Z",
                            message=r"Synchronization debug mode is a prototype feature")
    hide_profiler_cycle_warning()


def hide_profiler_cycle_warning():
    """Hide the spurious warning of torch 2.10 to 2.12 on every first ``torch.profiler.profile()``.

    It says the profiler "clears events at the end of each cycle", because ``prepare_trace`` checks for
    an earlier profiler after creating one (read from the 2.10.0, 2.11.0, 2.12.1 and 2.14.0 wheels; seen
    on 2.11.0 on an H100 and 2.12.1; 2.13.0 checks first).  One ``with profile()`` block is one cycle:
    nothing a lab reads is cleared.  The lab helpers that profile call it inside ``catch_warnings``.
    """
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.profiler\.profiler",
                            message=r"Warning: Profiler clears events at the end of each cycle")

"""Reproducible runs on whatever hardware the student has."""

import random

import torch


def seed(value=0):
    """Seed Python, NumPy (when installed) and torch on every device.

    Every notebook calls this in its first code cell so that two runs print the
    same numbers.  It returns nothing, so that cell shows no stray output.
    """
    random.seed(value)
    torch.manual_seed(value)  # also seeds every CUDA device
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(value)


def pick_device():
    """``torch.device("cuda")`` when a GPU is usable, else CPU.

    Notebooks run everything on CPU and use this only for their optional GPU
    sections.
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def mismatch_device():
    """A device other than the CPU to show a device-mismatch error on: the GPU, else ``meta``.

    ``meta`` tensors have a shape and a dtype but no data; the ops of a small model check
    their devices there too, so notebook 07's mismatch is a real error on any machine.
    Returns ``(device, starts)``: how that device's mismatch message may begin (on ``meta``
    it names the tensor that is on the wrong device first: the CPU one, or the ``meta`` one).
    """
    if torch.cuda.is_available():
        return torch.device("cuda"), ("Expected all tensors to be on the same device",)
    return torch.device("meta"), ("Tensor on device meta is not on the expected device cpu",
                                  "Tensor on device cpu is not on the expected device meta")

"""Honest wall-clock timing for the labs' speed measurements."""

import statistics
import time

import torch


def _synchronize(device):
    # CUDA kernels run asynchronously: without a sync we would time the launch, not the work.
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_it(fn, *, repeat=5, warmup=1, device="cpu"):
    """Median seconds of ``fn()`` over ``repeat`` runs, after ``warmup`` untimed runs.

    The median, not the mean, so one hiccup of a busy laptop does not decide a
    lesson's conclusion.
    """
    for _ in range(warmup):
        fn()
    _synchronize(device)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)

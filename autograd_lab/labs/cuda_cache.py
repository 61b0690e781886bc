"""What ``torch.cuda.empty_cache()`` changes, measured step by step on a GPU.

PyTorch's caching allocator keeps the memory of a deleted tensor for the next
allocation instead of handing it back to the driver.  Three numbers tell the
states apart: ``memory_allocated`` (bytes of live tensors), ``memory_reserved``
(what the allocator holds from the driver, live or cached) and the driver's free
memory (``mem_get_info``, what every process, and ``nvidia-smi``, sees).  The
measurement registers as ``"empty_cache"`` for ``benchmarks/gpu_record.py``; each
fact it returns is a comparison that fails if the allocator behaved otherwise.
"""

import torch

from autograd_lab.labs.gpu_records import Table, measurement

STEPS = (
    "one tensor alive",
    "a second one alive",
    "the second one deleted",
    "same size allocated again",
    "deleted again, then empty_cache()",
    "same size after empty_cache()",
)


@measurement("empty_cache")
def empty_cache_steps(device, size=2**28):
    """Allocated, reserved and driver-free bytes after each of ``STEPS``, with tensors of ``size`` bytes."""

    def snapshot():
        torch.cuda.synchronize(device)
        return (torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device),
                torch.cuda.mem_get_info(device)[0])

    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()                 # start from no cached segment of our own
    seen = []
    live = torch.empty(size, dtype=torch.uint8, device=device)
    seen.append(snapshot())
    scratch = torch.empty(size, dtype=torch.uint8, device=device)
    seen.append(snapshot())
    del scratch
    seen.append(snapshot())
    again = torch.empty(size, dtype=torch.uint8, device=device)
    seen.append(snapshot())
    del again
    torch.cuda.empty_cache()
    seen.append(snapshot())
    after = torch.empty(size, dtype=torch.uint8, device=device)
    seen.append(snapshot())
    del live, after
    torch.cuda.empty_cache()

    (a0, r0, f0), (a1, r1, f1), (a2, r2, f2), (a3, r3, f3), (a4, r4, f4), (a5, r5, f5) = seen
    facts = {
        # deleting a tensor frees its bytes for PyTorch but keeps them reserved, out of the driver's hands
        "delete_keeps_reserved": a1 - a2 >= size and r2 == r1,
        "delete_gives_driver_nothing": abs(f2 - f1) < size // 2,
        # the same size again is served from the cache: nothing more reserved
        "cache_serves_same_size": a3 - a2 >= size and r3 == r2,
        # empty_cache frees no tensor, returns the unoccupied segment to the driver, keeps the live one
        "empty_cache_keeps_allocated": a4 == a2,
        "empty_cache_returns_unoccupied": r2 - r4 >= size and f4 - f2 >= size // 2,
        "empty_cache_keeps_live_reserved": r4 >= a4 >= size,
        # and the next allocation of that size has to go back to the driver
        "next_allocation_reserves_again": r5 - r4 >= size,
    }
    mib = 2**20
    return Table(columns=["step", "allocated MiB", "reserved MiB", "driver free MiB"],
                 rows=[[step, a / mib, r / mib, f / mib] for step, (a, r, f) in zip(STEPS, seen)],
                 facts=facts,
                 note=f"tensors of {size // mib} MiB; driver free memory from torch.cuda.mem_get_info.")

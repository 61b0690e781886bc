"""The lab helpers: what the notebooks import to measure, time, launch and explain.

One module per idea: ``memory`` (what the graph keeps alive), ``recompute``
(checkpointing counted), ``precision`` and ``amp_timing`` (low-precision floats),
``timing``, ``grad_report`` (is every parameter trained?), ``distributed`` and
``ddp_scenarios`` (real DDP on local processes), ``tiny_engine`` (a scalar autograd
engine to read), ``errors`` (teach a real error on purpose), ``env`` (seeds and
devices) and ``gpu_records`` (GPU measurements shown to students without a GPU).
"""

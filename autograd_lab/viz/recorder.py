"""Record which module ran each op while the forward runs: ``record_modules(model)``.

The autograd graph does not say which ``nn.Module`` made an op, and guessing from
the parameters an op reads puts ReLUs, residual adds and attention maths outside
their blocks.  So a forward pre-hook notes where each module call starts (a
sequence number: autograd numbers nodes in creation order) and a forward hook,
when the call ends, tags every new node reachable from its outputs with the
module's path, innermost call first.  Each call of a module gets its own path
(``block``, then ``block#2``), and a call's ops are created in one stretch of
time, so collapsing calls into boxes (``depth=``) can never draw a cycle.

Tags live in ``grad_fn.metadata``, the dict PyTorch keeps on every node for tools
(anomaly mode stores the parent there), so they vanish with the graph.
"""

from contextlib import contextmanager

import torch

KEY = "autograd_lab_module"


def _next_sequence_nr():
    # A throwaway node: its number is the next one autograd hands out.
    with torch.enable_grad():
        return torch.empty(0, requires_grad=True).view(0).grad_fn._sequence_nr()


def _grad_fns(outputs):
    stack = [outputs]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.grad_fn is not None:
                yield item.grad_fn
        elif isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, (list, tuple)):
            stack += list(item)
        elif hasattr(item, "to_tuple"):   # transformers' ModelOutput
            stack += list(item.to_tuple())


def _tag(outputs, path, titles, start):
    """Tag every untagged node made since ``start`` that the outputs reach."""
    seen, stack = set(), list(_grad_fns(outputs))
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen or type(fn).__name__ == "AccumulateGrad":
            continue
        seen.add(fn)
        if fn._sequence_nr() < start:
            continue   # made before this call began: someone else's op
        fn.metadata.setdefault(KEY, (path, titles))
        stack += [next_fn for next_fn, _ in fn.next_functions]


@contextmanager
def record_modules(model):
    """Within ``with record_modules(model):`` every op made by a forward is tagged with the
    innermost submodule call that ran it; ``draw(loss, group_modules=model)`` uses the tags."""
    calls, titles, active, handles = {}, {}, [], []   # active: (dotted name, path, start) per open call

    def before(module, _args, name):
        parent_name, parent = (active[-1][0], active[-1][1]) if active else ("", ())
        short = name[len(parent_name) + 1:] if parent_name and name.startswith(parent_name + ".") else name
        for part in short.split("."):     # one level per module, so depth= counts modules
            key = parent + (part,)
            calls[key] = calls.get(key, 0) + 1 if part == short.split(".")[-1] else max(calls.get(key, 0), 1)
            parent = key if calls[key] == 1 else parent + (f"{part}#{calls[key]}",)
        titles[parent] = f"{name}: {type(module).__name__}" + (f" (call {calls[key]})" if calls[key] > 1 else "")
        active.append((name, parent, _next_sequence_nr()))

    def after(_module, _args, output, _name):
        _, path, start = active.pop()
        _tag(output, path, titles, start)

    try:
        for name, module in model.named_modules():
            if name:
                handles.append(module.register_forward_pre_hook(lambda m, a, n=name: before(m, a, n)))
                handles.append(module.register_forward_hook(lambda m, a, o, n=name: after(m, a, o, n)))
        yield model
    finally:
        for handle in handles:
            handle.remove()

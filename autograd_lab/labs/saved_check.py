"""Call a training-step answer and see which of its saved tensors its own measurement missed (06.checkpointed_step).

The exercise asks for a count *measured* with saved-tensor hooks (``saved_tensors`` and
``activations_kept``).  The value alone cannot tell a measured count from a typed one,
so the check calls the answer through ``step_with_unmeasured_saves``: it runs the answer
under saved-tensor hooks of its own, outermost.  Hooks form a stack and only the innermost
sees a save, so a tensor that reaches these hooks was saved outside every measurement the
answer made.  A step whose forward pass and loss ran inside its measurement sends none
here (a non-reentrant checkpoint's recomputation in backward saves under the checkpoint's
own hooks); a typed count sends them all.  Any measuring hooks pass, not only the course's.
"""

import torch


def step_with_unmeasured_saves(answer, model, x):
    """``answer(model, x)``, and after what it returned, how many tensors it saved outside its own measurement.

    Returns ``(*result, {"saved outside your measurement": n})``: ``n`` is the number of
    data-holding tensors (parameters left out) saved for backward that reached the checker's
    hooks, 0 for a step measured whole.
    """
    parameters = {_storage(p) for p in model.parameters()}
    missed = set()

    def pack(tensor):
        if tensor.untyped_storage().nbytes() > 0 and _storage(tensor) not in parameters:
            missed.add(_storage(tensor))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = answer(model, x)
    return (*(result if isinstance(result, (tuple, list)) else (result,)), {"saved outside your measurement": len(missed)})


def _storage(tensor):
    storage = tensor.untyped_storage()
    return (tensor.device.type, storage.data_ptr(), storage.nbytes())

"""Remember where each parameter was registered, so ``draw`` names parameters of a model nobody holds.

``draw(F.mse_loss(make_model()(X), Y))`` (notebook 07): by the time ``draw`` runs, the
model is gone (no variable holds it) and only its parameters live on, inside the
graph's ``AccumulateGrad`` nodes; a parameter does not know its name, so the picture
said "leaf (8, 4)".  torch.nn's global registration hooks are called whenever a
module registers a parameter or a submodule: they record, for each parameter, its
attribute name and its owner, and for each module, its name in its parent.  The
records are small objects under weak keys: they keep no module and no tensor alive,
and outlive the modules, which is the point.  Models built after ``autograd_lab.viz``
is imported are covered; the names are those of ``model.named_parameters()``
(``0.weight``), as if the outermost module were the model.
"""

import torch
from torch.utils.weak import WeakIdKeyDictionary

_MAX_DEPTH = 64   # a module registered inside itself would otherwise loop


class _Place:
    """Where a module sits: its name in its parent and the parent's place (None at the top)."""

    __slots__ = ("name", "parent")

    def __init__(self):
        self.name, self.parent = None, None


_module_places = WeakIdKeyDictionary()   # module -> _Place
_parameter_places = WeakIdKeyDictionary()   # parameter -> (_Place of its module, attribute name)


def _place_of(module):
    place = _module_places.get(module)
    if place is None:
        place = _module_places[module] = _Place()
    return place


def _on_parameter(module, name, parameter):
    if parameter is not None and parameter not in _parameter_places:   # a tied weight keeps its first name
        _parameter_places[parameter] = (_place_of(module), name)


def _on_module(module, name, submodule):
    if submodule is not None and submodule is not module:
        place = _place_of(submodule)
        if place.parent is None:   # a module shared by two parents keeps its first place
            place.name, place.parent = name, _place_of(module)


def qualified_name(parameter):
    """``0.weight`` for a parameter registered by a module, else None."""
    found = _parameter_places.get(parameter)
    if found is None:
        return None
    place, name = found
    parts = [name]
    for _ in range(_MAX_DEPTH):
        if place is None or place.name is None:
            break
        parts.append(place.name)
        place = place.parent
    return ".".join(reversed(parts))


_HANDLES = (torch.nn.modules.module.register_module_parameter_registration_hook(_on_parameter),
            torch.nn.modules.module.register_module_module_registration_hook(_on_module))

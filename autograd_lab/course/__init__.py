"""The course's own commands: ``autograd-lab`` (``cli``), ``doctor``, ``workspace``/``reset``, ``solve`` and ``site``.

Grading, the student build (``release``) and Gradescope live in ``autograd_lab.grading``.
"""

"""Internals of ``autograd_lab.exercises``; import the public names from there.

One idea per module:

* ``registry``: the ``Exercise`` definition and the table of registered exercises;
* ``hermetic``: running untrusted answer code without letting it change the session;
* ``records``: turning whatever an answer returns into a plain, saveable record;
* ``observe``: calling an answer on one case and recording what came back;
* ``compare``: comparing one recorded value with the reference's, naming misconceptions;
* ``detectors``: running an exercise's own misconception detectors on a failing case;
* ``judge``: turning the per-case comparisons into a ``Result``;
* ``display``: ``Result``, ``Hint`` and ``Solution``, with deterministic reprs;
* ``source``: the reference source shown by ``solution()`` and written by ``solve``.
"""

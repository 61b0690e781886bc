"""Private pieces of ``autograd_lab.viz``; one idea per module.

* ``model``: the drawn graph as plain data (``Node``, ``Model``);
* ``describe``: how a tensor, an op and a saved tensor are put into words;
* ``names``: variable names found in the caller's frame;
* ``walk``: the iterative walk of ``grad_fn.next_functions`` that builds a ``Model``;
* ``modules``: grouping by ``nn.Module`` and collapsing to a depth;
* ``recorder``: ``record_modules(model)``, which tags each op with the module call that ran it;
* ``tensor_view``: the micrograd-style view for beginners;
* ``dot`` / ``text`` / ``layout``: DOT source, plain text, and running graphviz;
* ``trace``: recording a backward pass with hooks;
* ``compare``: the difference of two graphs.

Nothing here keeps a tensor or a grad_fn alive after ``draw`` returns: a drawn
graph is a snapshot made of strings, so showing it never changes what memory
the autograd graph holds.
"""

"""The drawn graph as plain data: no tensors, no grad_fn objects, no ``id()``."""

from dataclasses import dataclass, field, replace

KINDS = ("op", "leaf", "saved", "tensor", "constant", "summary")


@dataclass(slots=True)
class Node:
    """One box in the picture.

    ``id`` comes from traversal order (``n0``, ``n1``...), so the same code always
    gives the same ids.  ``kind`` is one of ``KINDS``; ``op`` is the grad_fn class
    name for op nodes; ``name`` is the variable or parameter name when known;
    ``label`` is the text drawn.  The remaining fields drive styling.
    """

    id: str
    kind: str
    op: str | None
    name: str | None
    label: str
    shape: tuple | None = None
    state: str = "ok"          # "ok", "stale" or "freed" (saved tensors), "nograd" (constants)
    cluster: tuple = ()        # path of the group the node is drawn in, outermost first
    step: int | None = None    # execution number set by trace_backward
    mark: str | None = None    # "current" (trace frame), "only_a" / "only_b" (diff)
    value: str | None = None   # the tensor's value (small) or shape and norm, when known
    grad: str | None = None    # "grad: ..." when known (leaves, retain_grad tensors)
    use: tuple | None = None   # (k, n): copy k of a leaf drawn once per use, n uses in all
    arg: str | None = None     # constants: the op's argument they fill ("self", "mat2"), when known
    segment: int | None = None  # ops of a checkpointed segment: its number, in traversal order

    def signature(self):
        """What makes two nodes 'the same' when comparing graphs (no values, no ids).

        The name counts only for inputs (``w`` against a detached copy); the variable
        that happens to hold an op's output or a root (``loss_a``, ``loss_b``) does not.
        """
        name = self.name if self.kind in ("leaf", "constant", "saved") else None
        return (self.kind, self.op, name, self.shape)


@dataclass
class Model:
    """Nodes and edges in deterministic order.  Edges point from input to consumer."""

    nodes: list = field(default_factory=list)
    edges: list = field(default_factory=list)
    edge_kinds: dict = field(default_factory=dict)    # (src, dst) -> "saved"
    edge_labels: dict = field(default_factory=dict)   # (src, dst) -> text
    cluster_labels: dict = field(default_factory=dict)  # cluster path -> title
    notes: list = field(default_factory=list)         # sentences shown under the graph
    stale_ops: list = field(default_factory=list)
    freed_ops: list = field(default_factory=list)
    grad_fns: list = field(default_factory=list)      # class name of each distinct grad_fn, traversal order
    recorded_modules: bool = False                    # op clusters come from record_modules()

    def node(self, node_id):
        return self.by_id()[node_id]

    def by_id(self):
        return {n.id: n for n in self.nodes}

    def inputs_of(self):
        """node id -> ids of the nodes that feed it, in edge order."""
        inputs = {n.id: [] for n in self.nodes}
        for src, dst in self.edges:
            inputs[dst].append(src)
        return inputs

    def copy(self, nodes=None):
        """A shallow copy with fresh node records (so styling one copy leaves the other alone)."""
        return replace(
            self,
            nodes=[replace(n) for n in (self.nodes if nodes is None else nodes)],
            edges=list(self.edges),
            edge_kinds=dict(self.edge_kinds),
            edge_labels=dict(self.edge_labels),
            cluster_labels=dict(self.cluster_labels),
            notes=list(self.notes),
            stale_ops=list(self.stale_ops),
            freed_ops=list(self.freed_ops),
            grad_fns=list(self.grad_fns),
            recorded_modules=self.recorded_modules,
        )

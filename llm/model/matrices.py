"""What each weight matrix of a transformer *is*: one record type, declared by the modules.

A :class:`MatrixSpec` names one block ``param[index]`` that is drawn with one σ
(docs/science.md §1): its part (the γ rule's groups ``embedding``, ``qk``, ``vo``,
``attn_gate``, ``mlp``, ``mlp_out``, ``head``), its role ``kind`` (the same vocabulary as
theory's table, :func:`smallinit.theory.transformer.matrix_kinds`: ``embedding``,
``positions``, ``attn.q``, ``attn.k``, ``attn.v``, ``attn.o``, ``attn.gate``, ``mlp.gate``,
``mlp.up``, ``mlp.down``, ``head``), its true fan-in d_in and fan-out d_out, its block index
and whether it writes into the residual stream. Fused parameters hold several matrices as
row blocks (``qkv``: q | k | v; SwiGLU ``mlp.up``: gate | up) or, in GPT-2's Conv1D, column
blocks; ``index`` selects one. A parameter that interleaves its matrices per attention head
(GPT-NeoX's ``query_key_value``: q, k, v of head 0, then of head 1, ...) selects each by a
set of rows (:func:`row_set`: a tuple of row numbers in the index, which torch reads as
advanced indexing): reading it gives a copy, and :meth:`MatrixSpec.assign` writes it.

This package's modules *declare* their matrices where they create them
(:func:`declare`, after torchtitan's per-module init declarations and μP's "declare, don't
list"); :func:`declared_matrices` collects the declarations of a module tree in module
order. Hugging Face models cannot declare; :mod:`.init` reads their module names into the
same records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

ALL = (slice(None), slice(None))
DECLARED = "_declared_matrices"  # attribute of a module holding its declarations


def rows(start: int, stop: int) -> tuple[slice, ...]:
    """Index of rows start:stop (an nn.Linear weight is (out, in): output units)."""
    return (slice(start, stop), slice(None))


def cols(start: int, stop: int) -> tuple[slice, ...]:
    """Index of columns start:stop (GPT-2 Conv1D weights are (in, out))."""
    return (slice(None), slice(start, stop))


def row_set(numbers: Iterable[int]) -> tuple:
    """Index of the rows ``numbers`` (in that order), e.g. one part of a per-head fused
    parameter."""
    return (tuple(int(n) for n in numbers), slice(None))


def col_set(numbers: Iterable[int]) -> tuple:
    """Index of the columns ``numbers`` (a per-head fused Conv1D weight, stored (in, out))."""
    return (slice(None), tuple(int(n) for n in numbers))


def torch_index(index: tuple) -> tuple:
    """``index`` as torch reads it: a row or column set becomes a list (advanced
    indexing); slices stay (a view)."""
    return tuple(list(i) if isinstance(i, tuple) else i for i in index)


@dataclass(frozen=True)
class MatrixSpec:
    """One weight matrix: ``param[index]`` is the block drawn with one σ."""

    name: str  # parameter name, plus the block of a fused parameter ("…qkv.weight[q]")
    param: nn.Parameter
    index: tuple
    part: str
    d_in: int
    d_out: int
    layer: int
    residual_out: bool
    kind: str = ""
    bias: nn.Parameter | None = None  # the owning module's bias (declared matrices only)
    in_out: bool = False  # stored (d_in, d_out), as GPT-2's Conv1D; else (d_out, d_in)
    #: how a fused parameter holds this matrix: "" (the whole parameter, or declared),
    #: "blocks" (equal contiguous blocks) or "per_head" (interleaved head by head)
    layout: str = ""

    @property
    def weight(self) -> torch.Tensor:
        """The block as stored (a view of the parameter, a copy for a row set; detach
        before measuring)."""
        return self.param[torch_index(self.index)]

    def assign(self, values: torch.Tensor) -> None:
        """Write ``values`` (the block's shape) into the parameter, in place (call under
        ``torch.no_grad()``)."""
        self.param[torch_index(self.index)] = values.to(self.param.dtype)

    @property
    def rows_out(self) -> torch.Tensor:
        """The block as (d_out, d_in): one row per output unit (neuron, token, head), the
        orientation the measurements read (a view)."""
        return self.weight.T if self.in_out else self.weight

    @property
    def bias_block(self) -> torch.Tensor | None:
        """The bias entries of this matrix's output units (its rows), or None."""
        return None if self.bias is None else self.bias[torch_index(self.index)[0]]

    @property
    def shape(self) -> tuple[int, ...]:
        """The block's shape as stored (without reading it)."""
        dims = [
            len(i) if isinstance(i, tuple) else len(range(*i.indices(n)))
            for n, i in zip(self.param.shape, self.index, strict=False)
        ]
        return (*dims, *self.param.shape[len(self.index) :])


@dataclass(frozen=True)
class Declaration:
    """A matrix a module declares on one of its parameters (``attr`` on the module)."""

    attr: str
    tag: str | None  # the block's name inside a fused parameter, None for the whole
    index: tuple[slice, ...]
    part: str
    kind: str
    d_in: int
    d_out: int
    layer: int
    residual_out: bool


def declare(
    module: nn.Module,
    *,
    part: str,
    kind: str,
    d_in: int,
    d_out: int,
    layer: int = 0,
    residual_out: bool = False,
    attr: str = "weight",
    tag: str | None = None,
    index: tuple[slice, ...] = ALL,
) -> None:
    """Record on ``module`` that ``module.<attr>[index]`` is one matrix (call it where the
    module is built; declarations keep their order)."""
    decls = module.__dict__.setdefault(DECLARED, [])
    decls.append(Declaration(attr, tag, index, part, kind, d_in, d_out, layer, residual_out))


def declared_matrices(model: nn.Module) -> list[MatrixSpec]:
    """Every declared matrix of ``model``'s module tree, in module registration order (a
    parameter shared by two modules, e.g. a tied head, is declared only by its owner)."""
    out = []
    for prefix, module in model.named_modules():
        for decl in module.__dict__.get(DECLARED, ()):
            name = f"{prefix}.{decl.attr}" if prefix else decl.attr
            param = getattr(module, decl.attr)
            bias = getattr(module, "bias", None) if decl.attr == "weight" else None
            out.append(
                MatrixSpec(
                    name if decl.tag is None else f"{name}[{decl.tag}]",
                    param,
                    decl.index,
                    decl.part,
                    decl.d_in,
                    decl.d_out,
                    decl.layer,
                    decl.residual_out,
                    decl.kind,
                    bias,
                )
            )
    return out


def has_declarations(model: nn.Module) -> bool:
    return any(DECLARED in m.__dict__ for m in model.modules())


def select(
    table: Iterable[MatrixSpec], kind: str, layer: int | None = None
) -> Iterator[MatrixSpec]:
    """The matrices of a role (``"attn.q"``, ``"mlp.down"``, ...), optionally of one block."""
    return (s for s in table if s.kind == kind and (layer is None or s.layer == layer))


def one(table: Iterable[MatrixSpec], kind: str, layer: int = 0) -> MatrixSpec:
    """The single matrix of role ``kind`` in block ``layer``; ValueError when absent."""
    found = list(select(table, kind, layer))
    if len(found) != 1:
        raise ValueError(
            f"the model has {len(found)} matrices of kind {kind!r} in layer "
            f"{layer}; exactly one was expected"
        )
    return found[0]

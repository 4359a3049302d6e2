"""Torch functions rewritten while the PyTorch front end traces, because their ATen kernels read
their data to check it, which ``make_fx`` cannot trace on real tensors (``.item()`` of a traced
tensor), and torch's own traceable forms need its Python dispatcher for every op.

``F.one_hot(i, n)`` is ``i[..., None] == arange(n)`` as int64, as its traceable form, after a check
that keeps torch's refusal of a class outside ``[0, n)``: the smallest index divided by its
in-range flag, an integer division by zero in the kernel that computes it (a KernelError), the
check :mod:`stax.frontend.ops.gather` makes of an index.  Torch runs the division while it traces, so an example
input out of range fails there (integer division by zero).
"""
from __future__ import annotations

from typing import Any

from stax.errors import UnsupportedError


def one_hot(torch: Any, index: Any, num_classes: int = -1) -> Any:
    """``torch.nn.functional.one_hot`` from traceable ops, its class range checked at run time."""
    if num_classes < 0:
        raise UnsupportedError("F.one_hot without num_classes takes the class count from the index's largest "
                               "value, so the result's shape would depend on the data; pass num_classes")
    if index.dtype != torch.int64 or index.numel() == 0:
        return torch.nn.functional.one_hot(index, num_classes)  # torch's own error, or an empty result
    hot = (index.unsqueeze(-1) == torch.arange(num_classes)).long()
    smallest = (index // ((index >= 0) & (index < num_classes)).long()).amin()
    return torch.where(smallest >= 0, hot, hot)


def rewrites(torch: Any) -> Any:
    """A torch function mode that calls the rewrites above in place of the functions they stand for."""
    replaced = {torch.nn.functional.one_hot: one_hot}

    class Rewrites(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            rewrite = replaced.get(func)
            if rewrite is None:
                return func(*args, **(kwargs or {}))
            return rewrite(torch, *args, **(kwargs or {}))
    return Rewrites()

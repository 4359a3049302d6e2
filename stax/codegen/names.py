"""What of a program's names may reach generated source (issue 51: no name is pasted unchecked).

Buffers, kernels and scheduler nodes are named by stax from indices (``arg0``, ``buf3``,
``op7``, ``cpp_fused_op0_op1``); a graph's own names never reach the code (the lowering names
an input's buffer by its position).  These checks are the last line: generated C++ and Python
paste a name as an identifier only after :func:`source_name`, and a comment's label only after
:func:`comment_label`; a loaded file that got past its validator still cannot inject code.
"""
from __future__ import annotations

import re
from typing import Iterable

from stax.errors import StaxError
from stax.util.fields import IDENTIFIER

#: what a comment may hold: an identifier or an op label such as ``exp@model.py:12`` (``scheduler.labels.OP_LABEL``)
COMMENT_LABEL = re.compile(r"[A-Za-z0-9_.@:-]{1,200}")


def source_name(name: str) -> str:
    """``name``, checked to be an identifier before it is pasted into C++ or Python source."""
    if not isinstance(name, str) or IDENTIFIER.fullmatch(name) is None:
        raise StaxError(f"refusing to generate code naming {name!r}: stax pastes only identifiers "
                        "([A-Za-z_][A-Za-z0-9_]*) into generated source; rename it or make the schedule again")
    return name


def comment_label(label: str) -> str:
    """``label``, checked to hold only [A-Za-z0-9_.@:-] before it goes into a comment (no newline,
    quote, backslash or comment delimiter can end the comment)."""
    if not isinstance(label, str) or COMMENT_LABEL.fullmatch(label) is None:
        raise StaxError(f"refusing to put {label!r} in a comment of generated code: a label holds only "
                        "letters, digits and _ . @ : -")
    return label


def comment_labels(labels: Iterable[str]) -> str:
    """Labels joined by ``, `` for a comment, each checked by :func:`comment_label`."""
    return ", ".join(comment_label(label) for label in labels)


def comment_text(text: str) -> str:
    """Free text stax wrote (a reason) made safe for a ``//`` or ``#`` comment: every character
    but printable ASCII other than the backslash becomes ``?``."""
    return "".join(c if " " <= c <= "~" and c != "\\" else "?" for c in text)


def check_kernel_names(kernels: Iterable) -> None:
    """Every name of ``kernels`` (``Kernel``) that generated source pastes: the function's and
    its parameters' (identifiers), its nodes' (labels)."""
    for kernel in kernels:
        source_name(kernel.name)
        for name in (*kernel.params, *kernel.buffers):
            source_name(name)
        for node in kernel.nodes:
            comment_label(node)

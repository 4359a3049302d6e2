"""The least-peak order by dynamic programming over down-sets (Serenity-style), Definition 7.5.

The bytes live while task t runs depend only on the set S of tasks run before it (a down-set:
closed under predecessors): the buffers produced in S that are outputs or still have a user
outside S, plus t's own buffers.  Hence

    best(S + t) = min over the last task t of  max(best(S), resident(S) + produced(t)),

and best(all tasks) is the least peak over all topological orders.  The programme walks the
down-sets layer by layer (by size), memoizing one entry per down-set (the least peak reaching
it: a down-set's resident bytes do not depend on the order inside it).  Tasks without
predecessors run only just before their first successor (``least_peak`` proves this loses
nothing), which keeps their interleavings out of the down-sets.

Pruning (branch and bound): an order of known peak ``upper`` (the incumbent) bounds the search,
and a state whose peak already reaches ``upper`` is dropped, since every completion of it peaks
at least as high.  If no complete order survives, the incumbent is optimal.  The number of
down-sets grows exponentially with the width of the DAG: the programme stops with
``SearchStopped`` at ``max_states`` or a deadline.  ``dp`` runs it per series segment,
``window`` on windows of an order.
"""
from __future__ import annotations

import time

from stax.errors import StaxError
from stax.scheduler.problems import OrderProblem


class SearchStopped(StaxError):
    """The programme stopped at ``max_states`` or the deadline."""


def least_peak(problem: OrderProblem, incumbent: tuple[str, ...], max_states: int,
               deadline: float | None) -> tuple[tuple[str, ...], int]:
    """The least-peak order (and the down-sets kept) by the pruned programme of the module doc;
    raises ``SearchStopped`` when a layer exceeds ``max_states`` or ``deadline`` (a perf_counter time) passes.

    Late sources.  Call a task *pinned* when it has no predecessor and every buffer it produces
    is an output or has a user other than itself (it frees nothing and holds nothing only at its
    own step).  Some optimal order runs every pinned task in a run of pinned tasks that ends at
    its first successor (or, without successors, at the end of the order); so the programme
    schedules pinned tasks only as the pending pinned predecessors of the next other task
    (the rest at the end), which removes their interleavings from the down-sets.  Proof: move a
    pinned task s from its step to just before its first successor u (to the end if none); the
    tasks in between move one step earlier.  s reads no allocated buffer, so at each of their
    steps the live set only loses s's live buffers.  At s's new step the live bytes are
    resident(D) + produced(s), D the tasks before it; every byte of resident(D + s) =
    resident(D) + produced(s) (s has no dead buffer, and all its users come at or after u) was
    live at the step of the task just before u in the old order.  Steps from u on see the same
    sets.  So the peak does not grow.  Moving pinned tasks one after another keeps the property
    for those already moved (a moved run shifts as a whole, or gains a member), and in such an
    order the run before a task t is exactly t's pinned predecessors not yet run.
    """
    tasks = problem.tasks
    n = len(tasks)
    index = {t: i for i, t in enumerate(tasks)}
    preds, succs = [0] * n, [[] for _ in range(n)]
    for a, b in problem.dag().edges:
        preds[index[b]] |= 1 << index[a]
        succs[index[a]].append(index[b])
    produced, kept = [0] * n, [0] * n  # bytes a task allocates; of those, bytes resident after its step
    freed_by: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # task -> (users mask, size) it may free
    for buf in problem.buffers:
        p = index[buf.producer]
        users = 0
        for u in buf.users:
            users |= 1 << index[u]
        users &= ~(1 << p)
        produced[p] += buf.size
        if buf.is_output or users:
            kept[p] += buf.size
        if not buf.is_output and users:
            for u in dict.fromkeys(buf.users):
                if index[u] != p:
                    freed_by[index[u]].append((users, buf.size))
    pinned = sum(1 << i for i in range(n) if not preds[i] and produced[i] == kept[i])
    at_end = [i for i in range(n) if pinned >> i & 1 and not succs[i]]
    steps = [i for i in range(n) if not pinned >> i & 1]
    upper = problem.peak(incumbent)
    start_ready = sum(1 << i for i in steps if not preds[i] & ~pinned)
    layer: dict[int, tuple[int, int, int]] = {0: (0, 0, start_ready)}  # S -> (peak, resident, ready mask)
    history: list[dict[int, tuple[int, int]]] = []  # per layer: S -> (last task, previous S)
    states = 1
    for size in range(len(steps)):
        nxt: dict[int, tuple[int, int, int]] = {}
        back: dict[int, tuple[int, int]] = {}
        for expanded, (done, (peak, held, ready)) in enumerate(layer.items()):
            if expanded % 1024 == 1023 and deadline is not None and time.perf_counter() > deadline:
                raise SearchStopped(f"time limit reached in layer {size + 1} of {len(steps)} of down-sets")
            todo = ready
            while todo:
                low = todo & -todo
                todo ^= low
                i = low.bit_length() - 1
                run, before = preds[i] & pinned & ~done, 0
                bits = run
                while bits:
                    b = bits & -bits
                    bits ^= b
                    before += produced[b.bit_length() - 1]
                candidate = max(peak, held + before + produced[i])
                if candidate >= upper:
                    continue
                state = done | run | low
                if state in nxt and nxt[state][0] <= candidate:
                    continue
                after = held + before + kept[i] - sum(s for users, s in freed_by[i] if not users & ~state)
                grown = ready ^ low
                for j in succs[i]:
                    if not preds[j] & ~state & ~pinned:
                        grown |= 1 << j
                nxt[state] = (candidate, after, grown)
                back[state] = (i, done)
        states += len(nxt)
        if deadline is not None and time.perf_counter() > deadline:
            raise SearchStopped(f"time limit reached after {size + 1} of {len(steps)} layers of down-sets")
        if len(nxt) > max_states:
            raise SearchStopped(f"{len(nxt)} down-sets of size {size + 1} already exceed max_states={max_states} ({n} tasks)")
        if not nxt:
            return incumbent, states  # nothing beats the incumbent: it is optimal
        history.append(back)
        layer = nxt
    full = sum(1 << i for i in range(n)) & ~sum(1 << i for i in at_end)
    if steps:
        peak, held, _ = layer[full]
        if max(peak, held + sum(produced[i] for i in at_end)) >= upper:
            return incumbent, states
    elif sum(produced[i] for i in at_end) >= upper:
        return incumbent, states
    order, state = [], full
    for back in reversed(history):
        i, previous = back[state]
        run = state & ~previous & ~(1 << i)
        order += [tasks[i]] + [tasks[j] for j in reversed(range(n)) if run >> j & 1]
        state = previous
    return tuple(reversed(order)) + tuple(tasks[i] for i in at_end), states

"""Fuzzing of the loaders (issue 51): saved schedules and problem files mutated at random.

    python -m experiments.fuzz.files --mutations 2000 --seed 0

Each mutation changes one field of a saved file (a value replaced by a hostile or extreme one, a
key dropped or added, a list item dropped or repeated).  The file must then either load and
give correct results (a schedule's build agrees with ``stax.reference`` on its own graph; a
problem's greedy answer validates and is priced as the problem prices it) or be refused with a
one-line ``StaxError``.  Anything else (another exception, a message of several lines, a
timeout, the marker file a hostile name would create) is a failure, printed with the mutation.
"""
from __future__ import annotations

import argparse
import copy
import json
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

MARKER = Path(tempfile.gettempdir()) / "stax-fuzz-files-marker"
HOSTILE = f'x\n__attribute__((constructor)) static void p() {{ system("touch {MARKER}"); }}\n//'
#: the values a mutated field may get
VALUES = (None, True, False, "false", 0, -1, 1, 2, 3, 2**31, 2**63, 2**80, -2**80, 0.5, float("inf"), float("nan"),
          1e400, "", "x", "float16", "op0", "arg0", HOSTILE, "a/../b", [], {}, [[]], {"a": 1}, [0, 0], [1, -1],
          ["op0", "op0"])
SECONDS = 30  # a mutation taking longer is a hang


@dataclass
class Outcome:
    kind: str  # loaded (and correct), refused (one-line StaxError) or failure
    detail: str


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into a JSON value."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:8]):  # long lists: their first items stand for the rest
            found += _paths(item, prefix + (i,))
    return found


def mutate(data: dict, rng: np.random.Generator) -> tuple[dict, str]:
    """A copy of ``data`` with one random change, and its description."""
    data = copy.deepcopy(data)
    path = _paths(data)[1 + rng.integers(len(_paths(data)) - 1)]
    *parents, last = path
    holder = data
    for key in parents:
        holder = holder[key]
    kind = rng.choice(["value", "value", "value", "drop", "add", "repeat", "nudge"])
    if kind == "drop":
        del holder[last]
    elif kind == "add" and isinstance(holder[last], dict):
        holder[last]["extra"] = 1
    elif kind == "repeat" and isinstance(holder[last], list) and holder[last]:
        holder[last].append(copy.deepcopy(holder[last][0]))
    elif kind == "nudge" and isinstance(holder[last], (int, float)) and not isinstance(holder[last], bool):
        holder[last] = holder[last] + int(rng.choice([-1, 1]))
    else:
        kind = "value"
        holder[last] = copy.deepcopy(VALUES[rng.integers(len(VALUES))])
    return data, f"{kind} at {'.'.join(map(str, path))}" + (f" = {holder[last]!r:.60}" if kind != "drop" else "")


def _schedule_check(path: Path) -> None:
    import stax
    from stax.reference import evaluate
    schedule = stax.Schedule.load(path)
    compiled = stax.build(schedule)
    rng = np.random.default_rng(0)
    nodes = [schedule.graph.nodes[name] for name in schedule.graph.inputs]
    arrays = [rng.standard_normal(n.shape).astype(n.dtype) if n.dtype.startswith("float")
              else rng.integers(1, 5, n.shape).astype(n.dtype) for n in nodes]
    got = compiled(*[a.copy() for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    want = evaluate(schedule.graph, *[a.copy() for a in arrays], upcast=True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)


def _problem_check(path: Path) -> None:
    import stax
    from instances.store import load_file
    instance = load_file(path)
    if instance.fusion is not None:
        problem = instance.fusion
        result = stax.run_fusion("greedy", problem)
        assert problem.validate(result.partition) and result.cost == problem.cost(result.partition)
    else:
        problem = instance.order
        result = stax.run_order("best", problem)
        assert problem.validate(result.order) and result.peak == problem.peak(result.order)


def run_one(data: dict, check: Callable[[Path], None], directory: Path) -> Outcome:
    """Save ``data``, load and check it under the time limit; what happened."""
    from stax.errors import StaxError
    path = directory / "mutated.json"
    path.write_text(json.dumps(data))

    def hang(*_):
        raise TimeoutError(f"no answer within {SECONDS} s")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(SECONDS)
    try:
        check(path)
        outcome = Outcome("loaded", "")
    except StaxError as error:
        text = str(error)
        outcome = Outcome("refused", text) if text and "\n" not in text else \
            Outcome("failure", f"a StaxError of {len(text.splitlines())} lines: {text[:300]!r}")
    except Exception as error:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        outcome = Outcome("failure", f"{type(error).__name__}: {str(error)[:300]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if MARKER.exists():
        MARKER.unlink()
        outcome = Outcome("failure", "the hostile name's constructor ran (marker file)")
    return outcome


def seed_files() -> list[tuple[str, dict, Callable[[Path], None]]]:
    """The saved files mutated: a schedule of a small program with a constant and a reduction,
    a fusion problem and an order problem."""
    import stax
    from instances.store import load
    x = np.linspace(-2, 2, 48, dtype=np.float32).reshape(6, 8)
    schedule = stax.schedule(lambda a: (a * 2.5).exp().sum(-1, keepdim=True) / a.amax(-1, keepdim=True), x,
                             isa="none", threads=1)
    return [("schedule", schedule.to_dict(), _schedule_check),
            ("fusion problem", load("layered/8/0").fusion.to_dict(), _problem_check),
            ("order problem", load("data/torch/mlp_forward.order").order.to_dict(), _problem_check)]


def fuzz(mutations: int, seed: int, echo: Callable[[str], None] = print) -> dict[str, int]:
    """Mutate the seed files ``mutations`` times in all; the outcome counts (failures echoed)."""
    rng = np.random.default_rng(seed)
    counts = {"loaded": 0, "refused": 0, "failure": 0}
    with tempfile.TemporaryDirectory() as tmp:
        files = seed_files()
        for i in range(mutations):
            label, data, check = files[i % len(files)]
            mutated, what = mutate(data, rng)
            outcome = run_one(mutated, check, Path(tmp))
            counts[outcome.kind] += 1
            if outcome.kind == "failure":
                echo(f"FAILURE {label} #{i}: {what}: {outcome.detail}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = fuzz(args.mutations, args.seed)
    print(f"fuzz_files: mutations={args.mutations} seed={args.seed} " + " ".join(f"{k}={v}" for k, v in counts.items()))
    raise SystemExit(1 if counts["failure"] else 0)


if __name__ == "__main__":
    main()

"""A sweep's cells: one (instance, fusion strategy, order strategy, dependence rule), keyed by content.

The key hashes everything the cell's result depends on — the instance's content hash, the
strategies and their parameters, the measures, the reference and timing settings and the code
version — and nothing about where the cell appears in the config, so reordering a config or
adding families keeps finished cells.  The dependence rule (a compile option of program cells)
enters the key only when it is not the default ``parallel``, so configs written before the
option keep their keys.  Instance seeds derive from the sweep seed, the family, the size and
the seed index only.

A config's instance files (``files``) give one cell per strategy of the file's problem: a
FusionProblem file one per fusion strategy (no order: the file has no kernels yet), an
OrderProblem file one per order strategy.  Their ``family`` column is the model the file comes
from (``torch/mlp_train`` for ``data/torch/mlp_train.fusion``) and ``file`` the file itself.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from instances import store

from experiments.sweep.config import ReferenceSpec, StrategySpec, SweepConfig, TimingSpec

NO_FUSION = StrategySpec("-")  # order-only instances have nothing to fuse
NO_ORDER = StrategySpec("-")  # fusion problem files are not ordered (their order files are)
NO_DEPENDENCE = "-"  # abstract instances have no loops, so no dependence rule


def content_key(text: str) -> str:
    """The key of a piece of content (a cell, a reference, stored decisions) from its JSON text."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def derive_seed(sweep_seed: int, family: str, size: int, index: int) -> int:
    """Seed ``index`` of (family, size) in a sweep, reproducible and independent of the config order."""
    digest = hashlib.sha256(f"{sweep_seed}/{family}/{size}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Cell:
    family: str
    kind: str  # program, fusion or order (Instance.kind)
    size: int
    seed_index: int
    seed: int
    instance: str
    instance_hash: str
    fusion: StrategySpec
    order: StrategySpec
    dependence: str  # stax.compile's dependence rule for programs, else NO_DEPENDENCE
    measures: tuple[str, ...]
    reference: ReferenceSpec
    timing: TimingSpec
    timeout: float
    code_version: str
    file: str = ""  # the instance file of a file cell (an instance name or absolute path), else ""

    @property
    def key(self) -> str:
        content = asdict(self)
        for where in ("family", "kind", "size", "seed_index", "instance", "timeout", "file"):  # implied by the hash, or not results
            content.pop(where)
        if self.dependence in ("parallel", NO_DEPENDENCE):  # the default: keys as before the option
            content.pop("dependence")
        if self.reference.order == "cpsat":  # likewise
            content["reference"].pop("order")
        if "pareto" not in self.measures:  # likewise: the front's size limit matters only to its measure
            content["reference"].pop("pareto_nodes")
        return content_key(json.dumps(content, sort_keys=True, default=str))

    def identity(self) -> dict[str, Any]:
        """The row's identity and parameter columns."""
        return {"cell": self.key, "family": self.family, "kind": self.kind, "size": self.size, "seed_index": self.seed_index,
                "seed": self.seed, "instance": self.instance, "instance_hash": self.instance_hash,
                "fusion": self.fusion.label, "fusion_name": self.fusion.name, "fusion_params": self.fusion.to_json(),
                "order": self.order.label, "order_name": self.order.name, "order_params": self.order.to_json(),
                "dependence": self.dependence, "file": self.file, "code_version": self.code_version}


def plan(config: SweepConfig, code_version: str) -> list[Cell]:
    """Every cell of the sweep (order-only families get one cell per order strategy, abstract
    families one per strategy pair, programs one per strategy pair and dependence rule, instance
    files one per strategy of their problem)."""
    cells = []
    for fam in config.families:
        seeded = store.get_family(fam.name).seeded
        for size in fam.sizes:
            for index in range(config.seeds if seeded else 1):
                seed = derive_seed(config.seed, fam.name, size, index) if seeded else 0
                inst = store.instance(fam.name, size, seed)
                fusions = (NO_FUSION,) if inst.kind == "order" else config.fusion
                rules = config.dependence if inst.kind == "program" else (NO_DEPENDENCE,)
                cells += [Cell(fam.name, inst.kind, size, index, seed, inst.name, inst.content_hash(), f, o, d,
                               config.measures, config.reference, config.timing, config.cell_timeout, code_version)
                          for f in fusions for o in config.order for d in rules]
    for name in config.files:
        inst = store.load(name)
        pairs = [(f, NO_ORDER) for f in config.fusion] if inst.kind == "fusion" else [(NO_FUSION, o) for o in config.order]
        cells += [Cell(model_of(name), inst.kind, inst.size, 0, 0, name, inst.content_hash(), f, o, NO_DEPENDENCE,
                       config.measures, config.reference, config.timing, config.cell_timeout, code_version, name)
                  for f, o in pairs]
    return cells


def model_of(file: str) -> str:
    """The model an instance file comes from: ``torch/mlp_train`` for ``data/torch/mlp_train.fusion``
    (a shipped file) and ``mlp_train`` for ``/any/where/mlp_train.order.json``."""
    stem = file.removeprefix("data/") if file.startswith("data/") else Path(file).name.removesuffix(".json")
    return stem.removesuffix(".fusion").removesuffix(".order")

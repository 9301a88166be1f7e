"""Sweep planning without Prefect: which cells of a spec still need computing, cut into chunks.

Split out of :mod:`tasks.evaluate` so that the CLI can plan (and answer "nothing to compute") before importing
Prefect; :mod:`tasks.evaluate` re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tasks.lake import code_version, computed_cells
from tasks.spec import GridSpec

__all__ = ["CURVE_FPRS", "Chunk", "ChunkManifest", "EvalSettings", "SweepPlan", "auto_chunk_size", "build_plan"]


def _curve_grid() -> tuple[float, ...]:
    pts = {0.0, 1.0}
    pts.update(np.logspace(-10, -2, 33).tolist())  # four points a decade in the tail
    pts.update(np.linspace(0.01, 1.0, 100).tolist())  # every 0.01 in the body
    # 12 significant digits: 0.07 is stored as 0.07 (a spec's fpr of 0.07 then adds no near-duplicate point)
    return tuple(sorted({float(f"{x:.12g}") for x in pts}))


CURVE_FPRS: tuple[float, ...] = _curve_grid()
"""FPR points at which every trade-off curve is stored: grid-sweep cells (with the spec's own fprs) and registry
audits alike (log-spaced tail + linear body; 0 and 1 included)."""


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """Everything besides the mechanism that determines a cell's numbers."""

    deltas: tuple[float, ...]
    fprs: tuple[float, ...]  # spec fprs ∪ CURVE_FPRS, sorted
    representations: tuple[str, ...]
    discretization: float | None
    alpha_min: float
    code_version: str

    @classmethod
    def from_spec(cls, spec: GridSpec) -> EvalSettings:
        return cls(
            deltas=tuple(spec.deltas),
            fprs=tuple(sorted(set(spec.fprs) | set(CURVE_FPRS))),
            representations=tuple(spec.representations),
            discretization=None if spec.discretization is None else float(spec.discretization),
            alpha_min=float(spec.alpha_min),
            code_version=code_version(),
        )

    @functools.cached_property
    def eval_key(self) -> str:
        """Hash of the settings, computed once per instance (cached: a chunk's rows all carry it)."""
        return _hash(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A slice of a spec's cells: canonical mechanism JSON per cell plus the settings they are evaluated with."""

    spec_name: str
    kind: str
    mechanisms: tuple[str, ...]
    settings: EvalSettings

    @functools.cached_property
    def key(self) -> str:
        """Content hash of the chunk (cells + settings), computed once per instance: hashing a 2000-cell chunk
        takes ~0.5 ms, and re-hashing it for each of its rows cost ~2 s per chunk (10 s of a 10^4-cell sweep)."""
        return _hash({"mechanisms": self.mechanisms, "settings": dataclasses.asdict(self.settings)})

    @property
    def short_key(self) -> str:
        return self.key[:10]

    @property
    def size(self) -> int:
        return len(self.mechanisms)


@dataclasses.dataclass(frozen=True)
class ChunkManifest:
    """What the flow records for a chunk it wrote and verified: where its file is and a few counts."""

    chunk_key: str
    path: str  # relative to the lake root
    cells: int
    cells_ok: int
    worst_mu: float | None
    seconds: float
    computed_by_run: str


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    spec_name: str
    spec_hash: str
    eval_key: str
    cell_ids: tuple[str, ...]  # every cell of the spec, grid order
    chunks: tuple[Chunk, ...]  # only the cells not yet in the lake
    cells_present: int
    axis_names: tuple[str, ...] = ()  # the spec's grid keys (paths into its mechanism template), spec order
    axis_values: tuple[tuple[Any, ...], ...] = ()  # each cell's value of every grid key, aligned with cell_ids

    @property
    def cells_total(self) -> int:
        return len(self.cell_ids)

    @property
    def cells_to_compute(self) -> int:
        return sum(c.size for c in self.chunks)


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def auto_chunk_size(n_cells: int, workers: int) -> int:
    """About four chunks per worker, at least 8 and at most 2000 cells each (hundreds of task runs at most)."""
    if n_cells <= 0:
        return 1
    return int(min(2000, max(8, math.ceil(n_cells / (4 * max(1, workers))))))


def build_plan(spec: GridSpec, lake: Path, *, workers: int = 2) -> SweepPlan:
    """Pure planning (no Prefect): enumerate cells, drop the computed ones, cut the rest into chunks."""
    from gdpcore import mechanism_from_dict
    from gdpcore.mechanisms import content_hash_of_json

    settings = EvalSettings.from_spec(spec)
    eval_key = settings.eval_key
    present = computed_cells(lake, spec.name)
    cell_ids: list[str] = []
    axis_values: list[tuple[Any, ...]] = []
    todo: list[tuple[str, str]] = []  # (canonical JSON, kind) of each cell to compute
    seen: set[str] = set()
    for cell, values in spec.iter_cells_with_axes():
        mech = mechanism_from_dict(cell)
        text = mech.to_json()  # once per cell: the content hash and the chunk's text (the CLI plans before a sweep)
        cid = content_hash_of_json(text)
        if cid in seen:  # e.g. two rounded values that coincide
            continue
        seen.add(cid)
        cell_ids.append(cid)
        axis_values.append(values)
        if (cid, eval_key) not in present:
            todo.append((text, mech.kind))
    # Cells that differ only in `steps` share one single-step PLD inside analyze_grid: keep them in the same chunk,
    # whatever the axis order of the spec (compositions: cells with equal text but the step counts, see _sharing_key).
    todo.sort(key=lambda cell: _sharing_key(cell[0]))
    size = spec.chunk_size or auto_chunk_size(len(todo), workers)
    by_kind: dict[str, list[str]] = {}  # one kind per chunk (its lake partition): a spec may sweep the kind
    for mech_json, kind in todo:
        by_kind.setdefault(kind, []).append(mech_json)
    chunks = tuple(
        Chunk(spec_name=spec.name, kind=kind, mechanisms=tuple(cells[i : i + size]), settings=settings)
        for kind, cells in by_kind.items()
        for i in range(0, len(cells), size)
    )
    return SweepPlan(
        spec_name=spec.name,
        spec_hash=spec.spec_hash,
        eval_key=eval_key,
        cell_ids=tuple(cell_ids),
        chunks=chunks,
        cells_present=len(cell_ids) - len(todo),
        axis_names=tuple(spec.grid),
        axis_values=tuple(axis_values),
    )


def _sharing_key(mech_json: str) -> tuple[str, float]:
    """Sort key that puts cells sharing single steps next to each other: the mechanism without its step counts
    (``steps`` at any depth; Poisson-subsampled Gaussians are shared per (sigma, q) by gdpcore.analyze_grid), then
    the total of those counts."""
    data = json.loads(mech_json)
    total = [0.0]

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            if "steps" in node and isinstance(node["steps"], int | float):
                total[0] += float(node["steps"])
            return {k: strip(v) for k, v in node.items() if k != "steps"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    stripped = strip(data)
    return json.dumps(stripped, sort_keys=True), total[0]

"""The CPU estimate's cost terms as engine.estimate prices with them: each term's default (engine.constants, as
engine.fields.PROFILE_TERMS declares it), or the value a device profile carries where that profile applies to the
topology (its device and host count; engine.profile). A profile carries the terms `python -m db calibrate --terms`
fitted on its device; a term it lacks keeps its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from engine.fields import PROFILE_TERMS
from engine.types import Topology

DEFAULTS: dict[str, float] = {f.name: float(f.default) for f in PROFILE_TERMS}


@dataclass(frozen=True)
class CpuTerms:
    """Bytes of work at ddr_mem_bw per unit of each term (engine.estimate.cpu_terms, rank_workset_ms)."""

    values: tuple[tuple[str, float], ...]

    @cached_property
    def by_name(self) -> dict[str, float]:
        return dict(self.values)

    def __getitem__(self, name: str) -> float:
        return self.by_name[name]

    @property
    def id_work(self) -> float:
        return self["cpu_id_work"]

    @property
    def row_first_decade(self) -> float:
        return self["cpu_row_first_decade"]

    @property
    def row_later_decades(self) -> float:
        return self["cpu_row_later_decades"]

    @property
    def output_work(self) -> float:
        return self["cpu_output_work"]

    @property
    def workset_row_work(self) -> float:
        return self["cpu_workset_row_work"]

    @property
    def pressure_row_work(self) -> float:
        return self["cpu_pressure_row_work"]

    def optimizer_work(self, optimizer: str) -> float:
        """Per touched weight: 0 for sgd (the row terms hold its update)."""
        return self.by_name.get(f"cpu_optimizer_work_{optimizer}", 0.0)

    def optimizer_row_work(self, optimizer: str) -> float:
        return self.by_name.get(f"cpu_optimizer_row_work_{optimizer}", 0.0)


DEFAULT_TERMS = CpuTerms(tuple(DEFAULTS.items()))


def with_values(values: dict[str, float]) -> CpuTerms:
    """The defaults with these terms replaced (names of engine.fields.PROFILE_TERMS)."""
    unknown = sorted(set(values) - set(DEFAULTS))
    if unknown:
        raise KeyError(f"not a CPU cost term: {unknown[0]}; known: {', '.join(DEFAULTS)}")
    return CpuTerms(tuple({**DEFAULTS, **values}.items()))


def terms_of(topo: Topology) -> CpuTerms:
    """The terms a topology is priced with: its profile's where the profile applies and carries any, else the
    defaults."""
    prof = topo.profile
    if prof is None or not prof.terms or not prof.applies(topo):
        return DEFAULT_TERMS
    return _of_profile(prof.terms)


@lru_cache(maxsize=64)
def _of_profile(terms: tuple[tuple[str, float], ...]) -> CpuTerms:
    return with_values(dict(terms))  # the estimate asks once per table option: built once per profile


__all__ = ["DEFAULTS", "DEFAULT_TERMS", "CpuTerms", "terms_of", "with_values"]

"""The launcher of a kind: local (engine.validate.launch), slurm (engine.validate.slurm) or script
(engine.validate.script). Apart from them so that they import the shared launch module and nothing imports back."""

from __future__ import annotations

from engine.validate.launch import Launcher, LocalLauncher
from engine.validate.script import ScriptLauncher
from engine.validate.slurm import SlurmLauncher
from engine.validate.types import LauncherKind


def make_launcher(kind: LauncherKind) -> Launcher:
    if kind is LauncherKind.LOCAL:
        return LocalLauncher()
    if kind is LauncherKind.SLURM:
        return SlurmLauncher()
    return ScriptLauncher()


__all__ = ["make_launcher"]

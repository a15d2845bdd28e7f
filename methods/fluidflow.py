"""FluidFlow: conditional flow matching on the OT path with a U-Net backbone (Ramos,
Lacasa, Gutierrez, Valero, Rubio, arXiv 2604.08586; a baseline of the paper's HIT table).

What the source says (REFERENCES.md "Turbulence"): conditional flow matching (OT path)
with a U-Net or DiT backbone, conditioned on physical parameters, designed for
structured and unstructured meshes.  On a grid it is therefore FM-OT
(:mod:`pcgbench.methods.fm_ot`: the same path, loss, budget and Euler sampler) with its
own backbone choice, the U-Net (the DiT variant is not built); everything but the
backbone coincides with ``fm_ot``, which the paper's table also shows (FluidFlow 1.102
vs FM-OT 1.097 field MSE on HIT forecasting).  The U-Net's base width is the preset's
shared width so that the two differ in architecture, not in size class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pcgbench.backbones import BackboneConfig
from pcgbench.methods._flow import PRESET_RECIPE, preset_backbone
from pcgbench.methods.fm_ot import FMOT, FMOTConfig
from pcgbench.registry import METHODS


def unet_backbone(preset: str) -> BackboneConfig:
    """The preset's shared backbone size as a U-Net (levels capped at 3)."""
    base = preset_backbone(preset)
    return dataclasses.replace(base, kind="unet", layers=min(base.layers, 3))


@dataclass(frozen=True)
class FluidFlowConfig(FMOTConfig):
    backbone: BackboneConfig = field(default_factory=lambda: unet_backbone("cpu"))

    @classmethod
    def for_preset(cls, preset: str) -> FluidFlowConfig:
        return cls(backbone=unet_backbone(preset), **PRESET_RECIPE[preset].fields())


@METHODS.register("fluidflow")
class FluidFlow(FMOT):
    """Conditional OT flow matching with a U-Net backbone (FluidFlow on a grid)."""

    Config = FluidFlowConfig
    description = "FluidFlow: conditional OT flow matching, U-Net backbone (Ramos et al. 2026)"
    diagnostic_sampling = {}  # not a shared backbone

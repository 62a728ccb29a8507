"""Variational guides matching the model programs in :mod:`bayesprune.models`."""

from bayesprune.guides.normal import NormalGuide
from bayesprune.guides.spike_slab import SpikeSlabGuide

GUIDES = {"spike-slab": SpikeSlabGuide, "normal": NormalGuide}

__all__ = ["GUIDES", "NormalGuide", "SpikeSlabGuide"]

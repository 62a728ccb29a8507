"""Variational guides matching the model programs in :mod:`bayesprune.models`."""
from .dirac_spike_slab import DiracSpikeSlabGuide
from .normal import NormalGuide
from .spike_slab import SpikeSlabGuide

GUIDES = {"spike-slab": SpikeSlabGuide, "normal": NormalGuide}

__all__ = ["DiracSpikeSlabGuide", "GUIDES", "NormalGuide", "SpikeSlabGuide"]

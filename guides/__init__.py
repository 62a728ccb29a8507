"""Variational guides matching the model programs in :mod:`bayesprune.models`."""
from bayesprune.guides.dirac_spike_slab import DiracSpikeSlabGuide
from bayesprune.guides.normal import NormalGuide
from bayesprune.guides.spike_slab import SpikeSlabGuide

GUIDES = {"spike-slab": SpikeSlabGuide, "normal": NormalGuide}

__all__ = ["DiracSpikeSlabGuide", "GUIDES", "NormalGuide", "SpikeSlabGuide"]

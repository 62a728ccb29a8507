"""Variational guides matching the model programs in :mod:`bayesprune.models`."""
from .spike_slab import SpikeSlabGuide

GUIDES = {"spike-slab": SpikeSlabGuide}

__all__ = ["GUIDES", "SpikeSlabGuide"]

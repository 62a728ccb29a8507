"""The layer everything else rests on: the training loop, checkpoints, early stopping, optimisers,
distributions and their registered KLs, objectives and bounds, network structure, pruning, batch-norm
recalibration, preprocessing, export, validation and task helpers. It imports nothing of bayesprune above it."""

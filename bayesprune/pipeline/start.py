"""The network every fit of a run starts from: the config's network (its builder's initialisation, or the
user's trained weights, ``model.weights``), trained densely for ``model.pretrain_epochs`` first where asked.
"""

from bayesprune.core.tasks import mean_loss
from bayesprune.methods import FitContext
from bayesprune.models import new_net


def start_network(config, dataset, *, device, seed: int):
    """The config's network for ``dataset`` built from ``seed`` (with ``model.weights`` where given), on
    ``device``, after ``model.pretrain_epochs`` of plain training by maximum likelihood with the run's
    optimiser, schedule, minibatches (seeded with ``seed``), precision and augmentation (none: as built). It is
    handed over in training mode, as a freshly built network is."""
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
    epochs = config.model.pretrain_epochs
    if not epochs:
        return net
    ctx = FitContext.from_config(config, dataset, device=device, seed=seed)
    net = net.to(device)
    ctx.train_network(
        "pretrain", net, ctx.batches(dataset.x_train, dataset.y_train), epochs=epochs, loss=mean_loss(dataset.task)
    )
    return net.train()

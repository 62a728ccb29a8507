"""torchvision's classifiers as ``model.factory`` networks (``factory = "bayesprune.models.vision:classifier"``).

``model.factory`` calls ``callable(input_shape, output_dim, **options)``; torchvision's builders take
``num_classes`` and their own keywords, so this adapter builds ``network`` (any name of
``torchvision.models.list_models``, random weights) with ``num_classes = output_dim`` and the config's
other ``[model]`` keys as its keywords. ``network = "vision_transformer"`` builds
``torchvision.models.VisionTransformer`` for the data's image size (``image_size`` from ``input_shape``)
with the given ``patch_size``, ``num_layers``, ``num_heads``, ``hidden_dim`` and ``mlp_dim``: a small
ViT for 32x32 images, which torchvision's named ViTs (16-pixel patches of 224-pixel images) are not.
"""

import torchvision


def classifier(input_shape, output_dim: int, *, network: str = "resnet18", **options):
    """torchvision's ``network`` for images of ``input_shape`` (C, H, W) and ``output_dim`` classes."""
    if network == "vision_transformer":
        return torchvision.models.VisionTransformer(image_size=input_shape[-1], num_classes=output_dim, **options)
    return torchvision.models.get_model(network, weights=None, num_classes=output_dim, **options)

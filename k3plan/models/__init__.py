"""Models: config parsing, architecture families, the tensor inventory, bundled configs."""

from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.models.loader import Model, load_model, bundled_models

__all__ = ["Tensor", "TensorInventory", "Model", "load_model", "bundled_models"]

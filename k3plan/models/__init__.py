"""Models: config parsing, architecture families, the tensor inventory, bundled configs."""

from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.models.loader import Model, bundled_models, load_model

__all__ = ["Tensor", "TensorInventory", "Model", "load_model", "bundled_models"]

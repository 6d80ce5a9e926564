"""Accelerators: HardwareSpec (hardware_specs/*.yaml, every number sourced) and Topology."""

from k3plan.hardware.loader import DEFAULT_HARDWARE, list_hardware, load_hardware
from k3plan.hardware.spec import HardwareSpec, Link
from k3plan.hardware.topology import Topology, parse_topology, topologies_up_to

__all__ = [
    "DEFAULT_HARDWARE",
    "HardwareSpec",
    "Link",
    "Topology",
    "list_hardware",
    "load_hardware",
    "parse_topology",
    "topologies_up_to",
]

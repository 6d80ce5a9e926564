"""The one build setting pyproject.toml cannot express: hardware_specs/ stays at the top of the
repository (the design fixes it there) and the wheel carries it as the package data folder
k3plan/hardware_specs, read by k3plan.resources. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["k3plan*"]), "k3plan.hardware_specs"],
    package_dir={"k3plan.hardware_specs": "hardware_specs"},
)

"""The calibration scripts beside the public runs they replay (calibration/*.py), loaded as modules for the
tests that hold the simulator to those runs."""
import importlib.util
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent.parent / "calibration"


def load(name: str):
    """calibration/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, CALIBRATION / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The calibration scripts beside the public runs they replay (calibration/*.py), loaded as modules for the
tests that hold the simulator to those runs."""
import importlib.util
import sys
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent.parent / "calibration"


def load(name: str):
    """calibration/<name>.py as a module (its siblings importable, as when the script runs)."""
    if str(CALIBRATION) not in sys.path:
        sys.path.insert(0, str(CALIBRATION))
    spec = importlib.util.spec_from_file_location(name, CALIBRATION / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

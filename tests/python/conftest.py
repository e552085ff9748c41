"""The Python API's tests run against the installed package and compare with the CLI built beside it."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "build" / "release" / "tensormorph"
TESTDATA = (ROOT / ".." / "shared" / "testdata").resolve()
REAL = TESTDATA / "real"


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory):
    """Sidecars of read-only checkpoints and the CPU calibration stay out of the user's cache."""
    cache = tmp_path_factory.mktemp("cache")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    os.environ["TENSORMORPH_CONFIG"] = str(cache / "settings.json")
    yield cache


def run_cli(*args, check=True, env=None):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    done = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise AssertionError(f"tensormorph {' '.join(map(str, args))} exited {done.returncode}: {done.stderr}")
    return done.returncode, done.stdout, done.stderr


def cli_json(*args):
    return json.loads(run_cli(*args)[1])


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """The built-in demo: a sharded safetensors set and its mixed-quantization GGUF twin."""
    where = tmp_path_factory.mktemp("demo")
    run_cli("demo", where)
    return where


@pytest.fixture(scope="session")
def demo(demo_dir):
    """The demo's safetensors set (planted outliers, spectral spikes and one NaN), by its index."""
    return demo_dir / "model.safetensors.index.json"


@pytest.fixture(scope="session")
def demo_gguf(demo_dir):
    """The demo's GGUF twin (Q8_0, Q4_0 and F32 tensors converted from the set)."""
    return demo_dir / "demo-mixed-quant.gguf"

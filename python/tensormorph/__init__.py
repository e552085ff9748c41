"""Tensormorph for Python: open checkpoints (safetensors, GGUF, PyTorch, DCP, Megatron, DeepSpeed),
read tensors zero-copy, index them, and run the analyses with the placement records the CLI shows.

    >>> import tensormorph as tm
    >>> ckpt = tm.open("model.safetensors")
    >>> w = ckpt["model.layers.0.mlp.down_proj.weight"].numpy()   # a read-only view of the file
    >>> ckpt.stats().to_pandas()                                    # exact statistics, from the index
    >>> ckpt.spectrum("*.q_proj.weight", consent="gram")           # a rung below exact, accepted

Every call that computes takes ``compute=`` (constraints: ``"prefer=cuda"``, or
``{"prefer": "cuda", "never": ["webgpu"]}``) and, where an approximate rung may be needed,
``consent=``. Errors are exceptions whose messages name the file, the tensor and the offset.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

from . import _tensormorph as _native
from ._progress import progress_callback
from ._tensormorph import (
    FormatError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    ResourceExhaustedError,
    Tensor,
    TensormorphError,
    UnsupportedError,
    last_placements,
)

__all__ = [
    "open", "diff", "backends", "Checkpoint", "Tensor", "Report", "NeedsConsent", "last_placements",
    "TensormorphError", "FormatError", "NotFoundError", "UnsupportedError", "IoError",
    "ResourceExhaustedError", "InvalidArgumentError",
]
__version__ = "0.1.0"

Compute = Union[None, str, Mapping[str, Union[str, Sequence[str]]]]
Progress = Union[bool, None, Callable[[float, float, str, float], Any]]
Tensors = Union[None, str, Sequence[str]]


class NeedsConsent(TensormorphError):
    """An exact result is out of the memory or time budget and no rung below it was consented to.

    ``ladders`` lists, per tensor waiting, why and the rungs on offer (what each computes, its error
    bound, its modelled cost); ``report`` holds the rows of the tensors that were computed. Call
    again with ``consent=`` naming a rung (or ``"approximate"``: the cheapest below exact).
    """

    def __init__(self, message: str, ladders: list[dict], report: "Report"):
        super().__init__(message)
        self.code = "NEEDS_CONSENT"
        self.ladders = ladders
        self.report = report


class Report(list):
    """The rows of an analysis (one dict per tensor, as the CLI's ``--json`` gives them), with the
    whole ``document`` and the ``placements`` of the operations that ran."""

    def __init__(self, document: dict, explode: str | None = None):
        super().__init__(document.get("tensors", []))
        self.document = document
        self.placements: list[dict] = document.get("placements", [])
        self._explode = explode

    def row(self, name: str) -> dict:
        """The row of the tensor named ``name``."""
        for r in self:
            if _row_name(r) == name:
                return r
        raise KeyError(name)

    def to_pandas(self, explode: str | None = None):
        """The rows as a pandas DataFrame indexed by tensor name (nested fields become dotted
        columns: ``metrics.alpha``). ``explode`` names a per-tensor list to unfold into one row per
        item ("channels", "top_k", "values"); channel reports unfold their channels by default."""
        import pandas as pd

        key = explode or self._explode
        rows = [r for r in self if "error" not in r] if key else list(self)
        if key:
            frame = pd.json_normalize(rows, record_path=key, meta=["name"], record_prefix="")
            if key == "channels":
                frame.insert(0, "channel", frame.groupby("name").cumcount())
            return frame.set_index("name")
        frame = pd.json_normalize(rows)
        for key in ("name", "a"):
            if key in frame.columns:
                return frame.set_index(key)
        return frame


def _compute_spec(compute: Compute) -> str:
    if compute is None:
        return ""
    if isinstance(compute, str):
        return compute
    parts = []
    for key, names in compute.items():
        if isinstance(names, str):
            names = [names]
        parts.append(f"{key}={'+'.join(names)}")
    return ",".join(parts)


def _globs(tensors: Tensors) -> list[str]:
    if tensors is None:
        return []
    return [tensors] if isinstance(tensors, str) else list(tensors)


def _row_name(row: dict) -> str:
    """A row's tensor: "name", or "a" in a diff's rows."""
    return row.get("name", row.get("a", ""))


_NO_LADDER = object()  # an analysis without an exactness ladder (no consent= to check)


def _with_progress(progress: Progress, label: str, bytes_: bool, call: Callable[[Any], dict]) -> dict:
    """``call(callback)`` with the progress display ``progress`` asks for, closed however it ends."""
    callback = progress_callback(progress, label, bytes_=bytes_)
    try:
        return call(callback)
    finally:
        if hasattr(callback, "close"):
            callback.close()


def _raise_failures(report: Report, path: str) -> None:
    failed = [r for r in report if "error" in r]
    if not failed:
        return
    listed = "; ".join(f"'{_row_name(r)}': {r['error']}" for r in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    error = TensormorphError(f"{path}: {len(failed)} of {len(report)} requested tensors could not be computed: "
                             f"{listed}{more} (errors='keep' returns the rows with their errors)")
    error.code = "FAILED"
    error.report = report
    raise error


def _raise_needs_consent(report: Report, consent: str | None) -> None:
    waiting = [r for r in report if "needs_consent" in r]
    if not waiting:
        return
    ladders = [{"tensor": r["name"], **r["needs_consent"]} for r in waiting]
    first = ladders[0]
    rungs = ", ".join(f"{rung['id']} ({rung['estimated_ms']:.0f} ms on {rung['runs_on']}: {rung['error_bound']})"
                      for rung in first.get("ladder", []))
    offered = f"; the rung consented to ('{consent}') is not on offer" if consent else ""
    raise NeedsConsent(
        f"{len(waiting)} tensor{'s' if len(waiting) != 1 else ''} need consent; first '{first['tensor']}': "
        f"{first['reason']}{offered}; on offer: {rungs or 'none within the constraints'}. "
        f"Call again with consent='<rung>' (or 'approximate').", ladders, report)


class Checkpoint:
    """An open checkpoint: headers read, tensor bytes mapped when first used.

    Tensors are looked up by name (``ckpt[name]``), iterated in file order, and counted with ``len``.
    """

    def __init__(self, native: _native.Checkpoint):
        self._handle: _native.Checkpoint | None = native

    @property
    def _native(self) -> _native.Checkpoint:
        if self._handle is None:
            raise InvalidArgumentError("this checkpoint was closed (its `with` block ended); open it again")
        return self._handle

    @property
    def path(self) -> str:
        """The path that was opened."""
        return str(self._native.path)

    @property
    def format(self) -> str:
        """"safetensors", "gguf", "pytorch", "pytorch-dcp", "pytorch-sharded", "megatron-tp" or "deepspeed-zero"."""
        return self._native.format

    @property
    def files(self) -> list[dict]:
        """The files holding tensor data, each ``{"path", "size"}``."""
        return [{"path": str(f["path"]), "size": f["size"]} for f in self._native.files]

    @property
    def metadata(self) -> dict:
        """Format-level metadata: GGUF key/values, safetensors ``__metadata__``, archive facts."""
        return self._native.metadata

    @property
    def facts(self) -> dict:
        """How the checkpoint is stored: files, the reader's facts, bits per weight."""
        return self._native.facts

    @property
    def notes(self) -> list[str]:
        """What the reader noticed and tolerated (pickle globals recorded, not imported, ...)."""
        return self._native.notes

    @property
    def tensors(self) -> list[Tensor]:
        """Every tensor, in file order."""
        return self._native.tensors

    def __len__(self) -> int:
        return len(self._native)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._native.tensors)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._native

    def __getitem__(self, name: str) -> Tensor:
        if name in self._native:
            return self._native[name]
        import difflib

        close = difflib.get_close_matches(name, [t.name for t in self._native.tensors], n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(f"{self.path}: no tensor named {name!r}{hint}")

    def __repr__(self) -> str:
        if self._handle is None:
            return "<tensormorph.Checkpoint (closed)>"
        return f"<tensormorph.Checkpoint {self.format} {self.path!r}, {len(self)} tensors>"

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Lets the checkpoint go: its files are unmapped once no tensor or array view holds them."""
        self._handle = None

    def _analysis(self, label: str, progress: Progress, errors: str, call: Callable[[Any], dict], *,
                  bytes_: bool = True, explode: str | None = None, consent: Any = _NO_LADDER) -> Report:
        """Runs ``call(progress_callback)`` with the progress display ``label`` names, and raises for
        failed tensors (unless ``errors="keep"``) and for tensors waiting on consent."""
        report = Report(_with_progress(progress, label, bytes_, call), explode)
        if errors == "raise":
            _raise_failures(report, self.path)
        if consent is not _NO_LADDER:
            _raise_needs_consent(report, consent)
        return report

    def index(self, *, progress: Progress = True, tile: int = 256, threads: int = 0,
              index_path: str | os.PathLike | None = None, verify: bool = False, compute: Compute = None) -> dict:
        """Builds or refreshes the level-of-detail index (a ``.tmindex`` sidecar, or the cache
        directory when the checkpoint's is read-only) and says what it did. Ctrl-C stops after the
        current tensor; what was indexed is kept and the next call resumes."""
        return _with_progress(progress, "indexing", True,
                              lambda callback: _native._index(self._native, tile, threads,
                                                              os.fspath(index_path or ""),
                                                              verify, _compute_spec(compute), callback))

    def stats(self, tensors: Tensors = None, *, errors: str = "raise", tile: int = 256, threads: int = 0,
              compute: Compute = None, progress: Progress = True) -> Report:
        """Exact per-tensor statistics (count, mean, std, min, max, absmax, NaN/Inf, zeros), from the
        index, built or refreshed first. ``tensors``: shell globs (default every tensor).
        ``errors="keep"`` returns rows of tensors that failed with an ``"error"`` instead of raising."""
        return self._analysis("indexing", progress, errors,
                              lambda callback: _native._stats(self._native, _globs(tensors), tile, threads,
                                                              _compute_spec(compute), callback))

    def spectrum(self, tensors: Tensors = None, *, top: int = 0, consent: str | None = None,
                 recompute: bool = False, errors: str = "raise", threads: int = 0, compute: Compute = None,
                 progress: Progress = True) -> Report:
        """Singular values (float64, descending, each with its error bound) of every matrix, and the
        spectral metrics built on them (spectral and Frobenius norms, stable and effective rank,
        Marchenko-Pastur spikes, power-law alpha). A matrix whose exact SVD exceeds the budgets raises
        NeedsConsent with its ladder unless ``consent`` names a rung ("gram", "randomized",
        "sample", "exact" or "approximate"). ``top``: values listed per tensor (0: all). Exact
        spectra are kept beside the index."""
        return self._analysis("spectrum", progress, errors,
                              lambda callback: _native._spectrum(self._native, _globs(tensors), top, consent or "",
                                                                 recompute, threads, _compute_spec(compute),
                                                                 callback),
                              bytes_=False, consent=consent)

    def quantiles(self, tensors: Tensors = None, *,
                  probabilities: Sequence[float] = (0, 0.001, 0.01, 0.5, 0.99, 0.999, 1), mad: bool = False,
                  consent: str | None = None, recompute: bool = False, errors: str = "raise",
                  threads: int = 0, compute: Compute = None, progress: Progress = True) -> Report:
        """Exact quantiles of each tensor's finite values (NaN and ±Inf counted apart), by numpy's
        linear interpolation and by inverted_cdf, bit for bit as ``numpy.quantile`` of the values as
        float64; ``mad`` adds the median absolute deviation. Over the budgets, raises NeedsConsent
        unless ``consent`` names a rung ("histogram", "sample", "exact" or "approximate")."""
        return self._analysis("quantiles", progress, errors,
                              lambda callback: _native._quantiles(self._native, _globs(tensors),
                                                                  [float(p) for p in probabilities], mad,
                                                                  consent or "", recompute, threads,
                                                                  _compute_spec(compute), callback),
                              consent=consent)

    def outliers(self, tensors: Tensors = None, *, k: int = 10, magnitude: float = 6.0, robust_z: float = 3.5,
                 recompute: bool = False, errors: str = "raise", threads: int = 0, compute: Compute = None,
                 progress: Progress = True) -> Report:
        """The ``k`` finite values of largest magnitude of each tensor with their row and column, and
        its outlier rows and columns (holding |x| >= ``magnitude``, or a norm whose robust z-score is
        at least ``robust_z``)."""
        return self._analysis("outliers", progress, errors,
                              lambda callback: _native._outliers(self._native, _globs(tensors), k, magnitude,
                                                                 robust_z, recompute, threads, _compute_spec(compute),
                                                                 callback))

    def channels(self, tensors: Tensors = None, *, axis: str = "rows", recompute: bool = False, errors: str = "raise",
                 threads: int = 0, compute: Compute = None, progress: Progress = True) -> Report:
        """The statistics of every row (or column) of each tensor's matrix view: count, min, max,
        absmax, mean, L2 norm, NaN/Inf, zeros. ``to_pandas()`` gives one row per channel."""
        return self._analysis("channels", progress, errors,
                              lambda callback: _native._channels(self._native, _globs(tensors), axis, recompute,
                                                                 threads, _compute_spec(compute), callback),
                              explode="channels")

    def diff(self, other: "Checkpoint", tensors: Tensors = None, *, sort: str = "rel_fro",
             map_file: str | os.PathLike | None = None, errors: str = "raise", threads: int = 0,
             compute: Compute = None, progress: Progress = True) -> Report:
        """Compares this checkpoint (A, the reference of the relative metrics) with ``other`` (B)
        tensor by tensor, most changed first by ``sort``: max |a-b| and where, RMSE, relative
        Frobenius error, cosine, NMSE, SNR, differing elements, bit-for-bit identity. The document's
        ``matching`` lists tensors on one side only and shape mismatches."""
        return self._analysis("comparing", progress, errors,
                              lambda callback: _native._diff(self._native, other._native, _globs(tensors), sort,
                                                             os.fspath(map_file or ""), threads,
                                                             _compute_spec(compute), callback))

    def quantize_error(self, *, types: str | Sequence[str] | None = None, reference: "Checkpoint | None" = None,
                       tensors: Tensors = None, map_file: str | os.PathLike | None = None, rows: bool = False,
                       all_ranks: bool = False, errors: str = "raise", threads: int = 0, compute: Compute = None,
                       progress: Progress = True) -> Report:
        """What quantization cost: with ``reference``, this checkpoint's quantized tensors measured
        against the original they came from; with ``types`` ("Q4_K,Q8_0" or a list), what each ggml
        type would cost every floating-point matrix (quantized in memory by ggml's reference
        quantizers, nothing written). Per tensor: RMSE, max |e|, exact percentiles of |e|, relative
        error, SNR; the document's ``totals`` per type."""
        if types is not None and not isinstance(types, str):
            types = ",".join(types)
        return self._analysis("measuring" if reference is not None else "quantizing", progress, errors,
                              lambda callback: _native._quantize_error(self._native, None if reference is None
                                                                       else reference._native, types or "",
                                                                       _globs(tensors),
                                                                       os.fspath(map_file or ""), rows, all_ranks,
                                                                       threads, _compute_spec(compute), callback))


def open(path: str | os.PathLike, *, tp_split: Sequence[str] = ()) -> Checkpoint:  # noqa: A001 (the API's verb)
    """Opens a checkpoint: a safetensors, GGUF or PyTorch file, a ``model.safetensors.index.json``,
    or a directory holding one (sharded sets, Distributed Checkpoint, Megatron, DeepSpeed). Reads
    headers only. ``tp_split``: how a Megatron set's tensor-parallel parts join where the layer's
    name does not tell ("GLOB=DIM", "GLOB=gated", "GLOB=replicated")."""
    return Checkpoint(_native._open(os.fspath(path), list(tp_split)))


def diff(a: str | os.PathLike | Checkpoint, b: str | os.PathLike | Checkpoint, tensors: Tensors = None,
         **options: Any) -> Report:
    """What changed between two checkpoints (paths or open ones): ``Checkpoint.diff``."""
    a = a if isinstance(a, Checkpoint) else open(a)
    b = b if isinstance(b, Checkpoint) else open(b)
    return a.diff(b, tensors, **options)


def backends(compute: Compute = None) -> dict:
    """The compute backends found (tensormorph.backends/1, as ``tensormorph backends --json``): each
    one's device traits and its support per operation and dtype, the sources that could not load and
    why, and the constraints in force (the persisted settings, or ``compute``)."""
    return _native._backends(_compute_spec(compute))

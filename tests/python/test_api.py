"""tensormorph's Python API against the CLI on real checkpoints: tensors, zero-copy values,
statistics, spectra with consent, placement records, errors, threads and Ctrl-C."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensormorph as tm
from conftest import REAL, ROOT, TESTDATA, cli_json, run_cli

REAL_FILES = sorted(p for p in REAL.iterdir() if not p.name.endswith(".tmindex"))


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_every_real_file_opens_with_the_tensors_the_cli_lists(path):
    ckpt = tm.open(path)
    info = cli_json("info", path, "--json")
    assert ckpt.format == info["format"]
    assert [(t.name, t.dtype, list(t.shape), t.nbytes, t.offset) for t in ckpt] == \
        [(t["name"], t["dtype"], t["shape"], t["bytes"], t["offset"]) for t in info["tensors"]]
    assert len(ckpt) == len(info["tensors"])
    first = ckpt.tensors[0]
    assert first.name in ckpt and ckpt[first.name].name == first.name


def test_metadata_and_facts_are_plain_python():
    ckpt = tm.open(REAL / "stories260K.gguf")
    assert ckpt.metadata["general.architecture"] == "llama"
    assert isinstance(ckpt.metadata["tokenizer.ggml.tokens"], list)
    assert ckpt.facts["gguf.version"] == 3
    assert ckpt.files == [{"path": str(REAL / "stories260K.gguf"), "size": (REAL / "stories260K.gguf").stat().st_size}]
    peft = tm.open(REAL / "peft-gpt2_adapter_model.safetensors")
    assert peft.metadata["format"] == "pt"


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_numpy_equals_the_cli_export(path, tmp_path):
    ckpt = tm.open(path)
    for t in ckpt.tensors[:6]:
        decoded = tmp_path / "decoded.npy"
        run_cli("export", path, "--tensor", t.name, "-o", decoded)
        values = t.numpy()
        assert values.shape == t.shape
        exported = np.load(decoded)
        if t.zero_copy and values.dtype.kind != "f":
            # Integers: the CLI's float32 export rounds wide ones; compare the stored elements.
            stored = tmp_path / "stored.npy"
            run_cli("export", path, "--tensor", t.name, "--dtype", "stored", "-o", stored)
            assert np.array_equal(values, np.load(stored))
        else:
            assert np.array_equal(values.astype(np.float32), exported, equal_nan=True), t.name
        assert values.dtype == (np.float32 if not t.zero_copy else values.dtype)


def _address(array):
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("path,dtype", [("dfdx_mnist.safetensors", np.float32),
                                        ("ollama_llama-2-tiny-random.gguf", np.float16),
                                        ("taef2_decoder.pth", np.float16)])
def test_native_dtypes_are_read_only_views_of_the_mapping(path, dtype):
    ckpt = tm.open(REAL / path)
    tensors = [t for t in ckpt if np.dtype(t.numpy().dtype) == dtype and t.chunks == 0]
    assert len(tensors) >= 2
    a, b = tensors[0], tensors[1]
    va, vb = a.numpy(), b.numpy()
    assert a.zero_copy and not va.flags.writeable and not va.flags.owndata
    # Both views point into the same mapping of the file, as far apart as the tensors' offsets.
    if a.file == b.file:
        assert _address(vb) - _address(va) == b.offset - a.offset
    # No copy per call: a second view shares the first one's memory.
    assert np.shares_memory(va, a.numpy())
    with pytest.raises(ValueError):
        va[(0,) * va.ndim] = 1


def test_bf16_stored_bits_are_a_view_and_values_decode_exactly():
    ckpt = tm.open(REAL / "hqqsvd_test_bf16.safetensors")
    bf16 = [t for t in ckpt if t.dtype == "BF16"]
    assert len(bf16) == 5
    t = bf16[0]
    bits = t.numpy(stored=True)
    assert bits.dtype == np.uint16 and bits.shape == t.shape and not bits.flags.owndata
    other = t.numpy(stored=True)
    assert _address(bits) == _address(other)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    values = t.numpy()
    assert values.dtype == np.float32 and values.flags.writeable and not np.shares_memory(values, bits)
    assert np.array_equal(values, widened, equal_nan=True)
    assert t.zero_copy is False
    assert any(r["op"].startswith("tm.decode") for r in tm.last_placements())


def test_stats_equal_the_cli_json(demo):
    ckpt = tm.open(demo)
    report = ckpt.stats(progress=False, errors="keep")
    cli = cli_json("stats", demo, "--json")
    assert list(report) == cli["tensors"]
    assert report.document["nonfinite_tensors"] == cli["nonfinite_tensors"]
    assert report.document["schema"] == "tensormorph.stats/1"
    nan_tensor = cli["nonfinite_tensors"][0]
    assert report.row(nan_tensor)["nan"] >= 1
    frame = report.to_pandas()
    assert frame.loc[nan_tensor, "nan"] >= 1 and list(frame.index) == [r["name"] for r in cli["tensors"]]


def test_stats_of_a_real_gguf_with_globs_and_placements():
    ckpt = tm.open(REAL / "stories260K.gguf")
    report = ckpt.stats("blk.0.*", progress=False, compute="prefer=cpu")
    assert report and all(r["name"].startswith("blk.0.") for r in report)
    cli = cli_json("stats", REAL / "stories260K.gguf", "--tensor", "blk.0.*", "--json")
    assert list(report) == cli["tensors"]
    with pytest.raises(tm.NotFoundError, match="no tensor matches 'nothing.*'"):
        ckpt.stats("nothing.*", progress=False)


def test_index_reports_progress_and_its_placements(tmp_path):
    path = tmp_path / "mnist.safetensors"
    path.write_bytes((REAL / "dfdx_mnist.safetensors").read_bytes())
    calls = []
    report = tm.open(path).index(progress=lambda done, total, current, seconds: calls.append((done, total, current)))
    assert report["written"] and report["tensors_indexed"] == 8
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert report["placements"] and {r["backend"] for r in report["placements"]} == {"cpu"}
    assert tm.last_placements() == report["placements"]
    again = tm.open(path).index(progress=False)
    assert not again["written"] and again["tensors_reused"] == 8 and again["placements"] == []


def test_ctrl_c_stops_indexing_and_the_next_call_resumes(tmp_path):
    path = tmp_path / "mnist.safetensors"
    path.write_bytes((REAL / "dfdx_mnist.safetensors").read_bytes())
    seen = []

    def interrupt(done, total, current, seconds):
        seen.append(current)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tm.open(path).index(progress=interrupt)
    resumed = tm.open(path).index(progress=False)
    assert resumed["tensors_reused"] >= 1 and resumed["tensors_reused"] + resumed["tensors_indexed"] == 8


def test_threads_run_calls_concurrently_with_the_same_answers(demo):
    ckpt = tm.open(demo)
    results, errors = [None] * 4, []

    def work(i):
        try:
            results[i] = list(ckpt.stats(progress=False, errors="keep"))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and all(r == results[0] for r in results)


def test_spectrum_finds_the_demo_spikes_and_equals_the_cli(demo):
    ckpt = tm.open(demo)
    q1 = "model.layers.1.self_attn.q_proj.weight"
    report = ckpt.spectrum(q1, progress=False, recompute=True)
    row = report.row(q1)
    assert row["rung"] == "exact" and row["metrics"]["mp_spikes"] == 4
    values = np.array(row["values"])
    assert np.all(np.diff(values) <= 0)
    reference = np.linalg.svd(ckpt[q1].numpy().astype(np.float64), compute_uv=False)
    assert np.all(np.abs(values - reference) <= np.array(row["bounds"]) + 1e-12 * reference[0])
    cli = cli_json("spectrum", demo, "--tensor", q1, "--json")
    assert row["values"] == cli["tensors"][0]["values"]
    assert report.to_pandas().loc[q1, "metrics.mp_spikes"] == 4


CONSENT_SCRIPT = """
import sys, tensormorph as tm
ckpt = tm.open(sys.argv[1])
name = 'model.layers.0.mlp.up_proj.weight'
try:
    ckpt.spectrum(name, progress=False)
except tm.NeedsConsent as e:
    assert e.code == 'NEEDS_CONSENT' and isinstance(e, tm.TensormorphError)
    assert e.ladders[0]['tensor'] == name and 'over the time budget' in e.ladders[0]['reason'], e.ladders
    assert [r['id'] for r in e.ladders[0]['ladder']][:2] == ['exact', 'gram'], e.ladders
    assert "consent=" in str(e)
else:
    raise SystemExit('no NeedsConsent raised')
report = ckpt.spectrum(name, consent='gram', progress=False)
assert report.row(name)['rung'] == 'gram', report
print('ok')
"""


def test_consent_raises_with_the_ladder_and_is_honoured(demo, tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text('{"compute": {"time_budget_seconds": 1e-9}}')
    done = subprocess.run([sys.executable, "-c", CONSENT_SCRIPT, str(demo)], capture_output=True, text=True,
                          env={**os.environ, "TENSORMORPH_CONFIG": str(settings)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("name,error", [("gridcore_hdr-suppress-eos.gguf", tm.FormatError),
                                        ("gridcore_hdr-wrap-first-offset.gguf", tm.FormatError)])
def test_malformed_files_raise_naming_the_file(name, error):
    path = TESTDATA / "negative" / name
    with pytest.raises(error) as caught:
        tm.open(path)
    assert name in str(caught.value) and caught.value.code == "FORMAT_ERROR"
    code, _, err = run_cli("info", path, check=False)
    assert code != 0 and str(caught.value) in err


def test_missing_files_and_tensors_raise():
    with pytest.raises(tm.TensormorphError) as caught:
        tm.open(REAL / "no-such-file.safetensors")
    assert "no-such-file.safetensors" in str(caught.value)
    ckpt = tm.open(REAL / "dfdx_mnist.safetensors")
    with pytest.raises(KeyError, match="did you mean '0.0.weight'"):
        ckpt["0.0.weigth"]
    with pytest.raises(tm.InvalidArgumentError):
        ckpt.stats(progress=False, compute="prefer=no-such-backend")


def test_a_view_keeps_the_mapping_alive_after_the_checkpoint_goes():
    ckpt = tm.open(REAL / "dfdx_mnist.safetensors")
    view = ckpt["0.0.weight"].numpy()
    expected = view.copy()
    del ckpt
    import gc

    gc.collect()
    assert np.array_equal(view, expected)


def _without_placements(document):
    """A document as the CLI prints it without --explain; rows lose "source" (computed now or read
    from the kept results, which depends on which of the two ran first)."""
    rows = [{k: v for k, v in r.items() if k != "source"} for r in document["tensors"]]
    return {**{k: v for k, v in document.items() if k != "placements"}, "tensors": rows}


def test_quantiles_equal_the_cli_and_numpy(demo):
    ckpt = tm.open(demo)
    name = "model.layers.0.mlp.up_proj.weight"
    report = ckpt.quantiles(name, probabilities=[0.01, 0.5, 0.99], mad=True, progress=False, recompute=True)
    cli = cli_json("quantiles", demo, "--tensor", name, "-p", "0.01,0.5,0.99", "--mad", "--json")
    assert _without_placements(report.document) == _without_placements(cli)
    values = ckpt[name].numpy().astype(np.float64).ravel()
    expected = np.quantile(values[np.isfinite(values)], [0.01, 0.5, 0.99])
    assert [q["linear"] for q in report.row(name)["quantiles"]] == list(expected)


def test_outliers_and_channels_equal_the_cli(demo):
    ckpt = tm.open(demo)
    name = "model.layers.1.self_attn.q_proj.weight"
    outliers = ckpt.outliers(name, k=5, progress=False)
    assert _without_placements(outliers.document) == cli_json("outliers", demo, "--tensor", name, "-k", "5", "--json")
    assert len(outliers.row(name)["top_k"]) == 5
    channels = ckpt.channels(name, axis="cols", progress=False)
    assert _without_placements(channels.document) == cli_json("channels", demo, "--tensor", name, "--axis", "cols",
                                                                "--json")
    frame = channels.to_pandas()
    assert len(frame) == ckpt[name].shape[1] and list(frame["channel"][:3]) == [0, 1, 2]


def test_diff_and_quantize_error_equal_the_cli(demo, demo_gguf):
    report = tm.diff(demo, demo_gguf, progress=False)
    cli = cli_json("diff", demo, demo_gguf, "--json")
    assert _without_placements(report.document) == cli
    assert report.placements and report.to_pandas().index[0] == cli["tensors"][0]["a"]
    gguf = tm.open(demo_gguf)
    measured = gguf.quantize_error(reference=tm.open(demo), progress=False)
    assert _without_placements(measured.document) == cli_json("quantize-error", demo_gguf, "--reference", demo, "--json")
    what_if = tm.open(demo).quantize_error(types=["q4_k", "Q8_0"], tensors="model.layers.0.*", progress=False)
    assert {t["type"] for t in what_if.document["totals"]} == {"Q4_K", "Q8_0"}
    with pytest.raises(tm.InvalidArgumentError, match="not a type with a ggml encoder"):
        tm.open(demo).quantize_error(types="Q9_9", progress=False)
    with pytest.raises(tm.InvalidArgumentError, match="exactly one of"):
        tm.open(demo).quantize_error(progress=False)


SIGINT_SCRIPT = """
import os, signal, sys, tensormorph as tm
# Python's own Ctrl-C handler, even where the test runner was started with SIGINT ignored (a
# background job of a shell): Python then leaves SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
ckpt = tm.open(sys.argv[1])
def interrupt_once(done, total, current, seconds, sent=[]):
    if not sent:
        sent.append(True)
        os.kill(os.getpid(), signal.SIGINT)   # a real Ctrl-C, caught while the library works
try:
    ckpt.index(progress=interrupt_once)
except KeyboardInterrupt:
    again = ckpt.index(progress=False)
    assert again["tensors_reused"] + again["tensors_indexed"] == len(ckpt), again
    print("interrupted and resumed")
else:
    print("not interrupted")
"""


def test_a_real_sigint_raises_keyboard_interrupt_and_the_index_stays_usable(tmp_path):
    path = tmp_path / "mnist.safetensors"
    path.write_bytes((REAL / "dfdx_mnist.safetensors").read_bytes())
    done = subprocess.run([sys.executable, "-c", SIGINT_SCRIPT, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "interrupted and resumed", done.stdout + done.stderr


def test_progress_true_draws_a_bar_on_stderr(tmp_path, capsys):
    path = tmp_path / "stories.gguf"
    path.write_bytes((REAL / "stories260K.gguf").read_bytes())
    tm.open(path).index(progress=True)
    err = capsys.readouterr().err
    assert "indexing" in err and "100%" in err, err


@pytest.mark.parametrize("name", ["dcp_1rank", "dcp_2rank"])
def test_distributed_checkpoint_tensors_equal_their_consolidated_twins(name):
    ckpt = tm.open(TESTDATA / "dcp" / name)
    twin = tm.open(TESTDATA / "dcp" / f"{name}.consolidated.safetensors")
    assert ckpt.format == "pytorch-dcp"
    shared = [t for t in ckpt if t.name in twin]
    assert shared and any(t.chunks > 1 for t in shared) == (name == "dcp_2rank")
    for t in shared:
        mine, theirs = t.numpy(), twin[t.name].numpy()
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        assert mine.tobytes() == theirs.tobytes(), t.name


def test_quantized_gguf_tensors_decode_as_the_cli_exports(demo_gguf, tmp_path):
    ckpt = tm.open(demo_gguf)
    quantized = [t for t in ckpt if t.dtype.startswith("Q")]
    assert {t.dtype for t in quantized} >= {"Q8_0", "Q4_0"}
    for t in quantized[:4]:
        assert not t.zero_copy
        out = tmp_path / "t.npy"
        run_cli("export", demo_gguf, "--tensor", t.name, "-o", out)
        assert np.array_equal(t.numpy(), np.load(out))
        raw = t.numpy(stored=True)
        assert raw.dtype == np.uint8 and raw.shape == (t.nbytes,) and not raw.flags.writeable


def test_pytorch_views_keep_their_strides_and_share_their_storage():
    ckpt = tm.open(ROOT / "tests" / "fixtures" / "pytorch" / "views.pt")
    base, transposed, col1 = ckpt["base"].numpy(), ckpt["transposed"].numpy(), ckpt["col1"].numpy()
    assert np.array_equal(transposed, base.T) and np.shares_memory(transposed, base)
    assert np.array_equal(col1, base[:, 1]) and col1.strides == (16,)
    assert np.array_equal(ckpt["broadcast"].numpy(), np.broadcast_to(base[2], (2, 4)))


def test_a_closed_checkpoint_says_so_and_its_views_stay_valid():
    with tm.open(REAL / "dfdx_mnist.safetensors") as ckpt:
        view = ckpt["0.0.weight"].numpy()
        first = float(view.ravel()[0])
    assert "closed" in repr(ckpt)
    with pytest.raises(tm.InvalidArgumentError, match="closed"):
        ckpt.stats(progress=False)
    assert float(view.ravel()[0]) == first


def test_backends_equal_the_cli_listing():
    listing = tm.backends()
    cli = cli_json("backends", "--json")
    assert listing["schema"] == "tensormorph.backends/1"
    assert [b["name"] for b in listing["backends"]] == [b["name"] for b in cli["backends"]]
    cpu = next(b for b in listing["backends"] if b["name"] == "cpu")
    assert cpu["capabilities"]["tm.tile_stats@1"]["F32"]["level"] == "full"
    assert listing["constraints"] == cli["constraints"]

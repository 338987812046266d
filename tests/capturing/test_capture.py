"""Capture from a model (spectra_cli.capture): the moments of hooked activations against np.cov of the same tokens
(padding dropped), against the host accumulator, across two gloo processes, snapshots, and every refusal."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the capture extra (torch) is installed by the test extras")
transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)  # (the tests' tiny models: two spinning intra-op threads only wait on a busy machine)

import spectra_cli as spectra  # noqa: E402
from spectra_cli.capturing.hooks import module_matcher  # noqa: E402
from spectra_cli.errors import InputError, OptionError  # noqa: E402

pytestmark = pytest.mark.slow  # (the default run does not even import this module: tests/conftest.py)


def _bert(seed: int = 0, width: int = 32, vocab: int = 120):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=2 * width, max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


def _batches(seed: int = 1, n: int = 4, b: int = 3, length: int = 10):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 120, (b, length), generator=g)
        mask = torch.ones(b, length, dtype=torch.long)
        for i in range(b):
            mask[i, int(torch.randint(3, length + 1, (1,), generator=g)):] = 0
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def test_captured_moments_are_the_covariance_of_the_unpadded_tokens():
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.*", groups=4, precision="float64") as cap:
        with torch.no_grad():
            for kw in batches:
                model(**kw)
    assert cap.modules == ("encoder.layer.0", "encoder.layer.1") and not cap.active
    for k, name in enumerate(cap.modules):
        with torch.no_grad():
            H = np.concatenate([model(**kw, output_hidden_states=True).hidden_states[k + 1][kw["attention_mask"] > 0]
                                .double().numpy() for kw in batches])
        acc = cap[name]
        assert acc.n == len(H) == sum(int(kw["attention_mask"].sum()) for kw in batches)
        ref = np.sort(np.linalg.eigvalsh(np.cov(H.T)))[::-1]
        got = spectra.fit(acc, window="3:12").spectrum.eigenvalues
        np.testing.assert_allclose(got[:31], ref[:31], rtol=1e-10, atol=1e-12 * ref[0])
        np.testing.assert_allclose(acc.moments.mean, H.mean(axis=0), rtol=1e-12, atol=1e-12)
        assert len(acc.groups) == 4 and sum(g.n for g in acc.groups) == acc.n
        # the same blocks through the host accumulator: the same moments, histogram and fourth moments
        host = spectra.Accumulator(H.shape[1], groups=4, block_rows=10**6)
        start = 0
        for kw in batches:
            rows = int(kw["attention_mask"].sum())
            host.update(H[start:start + rows])
            start += rows
        np.testing.assert_allclose(acc.moments.m2, host.moments.m2, rtol=1e-12, atol=1e-12 * host.moments.m2.max())
        assert acc.moments.norms.rows == host.moments.norms.rows
        # (each norm about the mean of every row so far on both: the same bins, but for a norm at a bin's edge)
        (va, ca), (vb, cb) = acc.moments.norms.values(), host.moments.norms.values()
        np.testing.assert_allclose(np.repeat(va, ca.astype(int)), np.repeat(vb, cb.astype(int)), rtol=0.022)
        assert np.count_nonzero(np.repeat(va, ca.astype(int)) != np.repeat(vb, cb.astype(int))) <= 2
        assert acc.moments.norms.coordinate_fourth == pytest.approx(host.moments.norms.coordinate_fourth, rel=1e-9)
        assert acc.cosine.mean_cosine() == pytest.approx(host.cosine.mean_cosine(), rel=1e-10)


def test_module_patterns_are_globs_of_dotted_parts_or_regular_expressions():
    names = ["encoder.layer.0", "encoder.layer.0.output", "bert.encoder.layer.11", "encoder.layer.10.attention"]
    assert [n for n in names if module_matcher("encoder.layer.*")(n)] == ["encoder.layer.0", "bert.encoder.layer.11"]
    assert [n for n in names if module_matcher(r"layer\.\d+$")(n)] == ["encoder.layer.0", "bert.encoder.layer.11"]
    assert [n for n in names if module_matcher("encoder.layer.?")(n)] == ["encoder.layer.0"]
    assert [n for n in names if module_matcher("encoder.layer.[!1-9]")(n)] == ["encoder.layer.0"]  # (a range)
    with pytest.raises(OptionError, match="modules='layer\\(' is not a valid regular expression"):
        module_matcher("layer(")


def test_snapshots_are_moment_files_a_run_reads_by_step(tmp_path):
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.1", groups=2) as cap:
        with torch.no_grad():
            model(**batches[0])
            first = cap.save(tmp_path / "run", step=100, reset=True)
            model(**batches[1])
            second = cap.save(tmp_path / "run", step=200)
    assert first == [str(tmp_path / "run" / "step_100" / "encoder.layer.1.npz")]
    a, b = (spectra.Accumulator.load(p) for p in (first[0], second[0]))
    assert a.n == int(batches[0]["attention_mask"].sum()) and b.n == int(batches[1]["attention_mask"].sum())
    assert a.sources[0]["capture"] == "encoder.layer.1" and b.sources[0]["step"] == 200
    assert b.sources[0]["since_step"] == 100
    results = tmp_path / "results.jsonl"
    spectra.batch([str(tmp_path / "run" / "step_100"), str(tmp_path / "run" / "step_200")], window="3:12",
                  jsonl=results)
    trend = spectra.trend(results, metric="rank.participation_ratio")  # the step from step_<N>, no --step-regex
    assert sorted(p.step for p in trend.points) == [100.0, 200.0]
    assert len({p.series for p in trend.points}) == 1


class _Odd(torch.nn.Module):
    """A module whose output is not a tensor, or changes width, or is not finite, as asked."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Identity()
        self.width = 4
        self.kind = "tensor"

    def forward(self, x):
        y = self.inner(x[..., : self.width])
        if self.kind == "dict":
            return {"a": 1}
        if self.kind == "nan":
            y = y.clone()
            y[0, 0] = float("nan")
        return y


class _Root(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Odd()

    def forward(self, x, attention_mask=None):
        return self.block(x)


def _no_hooks(model) -> bool:
    """No hook of a capture is left (transformers adds hooks of its own for output_hidden_states)."""
    hooks = [h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
    return not any("Capture" in getattr(h, "__qualname__", "") for h in hooks)


@pytest.mark.parametrize("kind, message", [
    ("dict", "module 'block' returns dict, not a tensor: choose one with output"),
    ("width", "module 'block' returned rows of 3 features after 4 in earlier calls"),
    ("nan", "module 'block' produced 1 row(s) with NaN or infinite values (call 2)"),
    ("mask", "module 'block': the attention mask has shape (2, 5), its output (2, 6, 4)"),
])
def test_bad_activations_are_one_error_naming_the_module_and_the_hooks_are_gone(kind, message):
    root = _Root()
    x = torch.randn(2, 6, 8)
    with pytest.raises(InputError) as err:
        with spectra.capture(root, modules="block") as cap:
            root(x)
            if kind == "width":
                root.block.width = 3
            elif kind == "mask":
                root(x, attention_mask=torch.ones(2, 5))
            else:
                root.block.kind = kind
            root(x)
    assert message in str(err.value)
    assert _no_hooks(root) and not cap.active


def test_refusals_before_any_call(tmp_path):
    root = _Root()
    with pytest.raises(InputError, match="modules='nothing' matches none of the model's 2 modules"):
        spectra.capture(root, modules="nothing")
    with pytest.raises(OptionError, match="must be a torch.nn.Module"):
        spectra.capture(np.zeros(3), modules="block")
    with pytest.raises(OptionError, match="groups=100000 must be at most 256"):
        spectra.capture(root, modules="block", groups=100000)
    cap = spectra.capture(root, modules="block", drop_nonfinite=True)
    x = torch.randn(2, 6, 8)
    x[1, 2, 0] = float("inf")
    root(x)
    cap.close()
    assert _no_hooks(root) and cap.rows("block") == 11 and cap["block"].n_dropped == 1
    (tmp_path / "f").write_text("x")
    with pytest.raises(spectra.OutputError, match="exists and is not a directory"):
        cap.save(tmp_path / "f")
    with pytest.raises(InputError, match="saw no rows"):
        spectra.capture(root, modules="block")["block"]


def _ranked(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    try:
        model = _Root()
        torch.manual_seed(7)
        xs = [torch.randn(3, 6, 8, dtype=torch.float64) for _ in range(4)]
        with spectra.capture(model, modules="block", groups=4, precision="float64") as cap:
            for x in xs[rank::world]:
                model(x)
        cap.save(out)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_on_two_halves_save_what_one_process_saves_on_all(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_ranked, args=(2, str(tmp_path / "store"), str(tmp_path / "two")), nprocs=2, join=True)
    model = _Root()  # one process on every batch, no process group
    torch.manual_seed(7)
    with spectra.capture(model, modules="block", groups=4, precision="float64") as cap:
        for x in [torch.randn(3, 6, 8, dtype=torch.float64) for _ in range(4)]:
            model(x)
    cap.save(tmp_path / "one")
    assert sorted(os.listdir(tmp_path / "two")) == ["block.npz"]  # rank 0 wrote, rank 1 wrote nothing else
    two, one = (spectra.Accumulator.load(tmp_path / d / "block.npz") for d in ("two", "one"))
    assert two.n == one.n == 72
    np.testing.assert_allclose(two.moments.m2, one.moments.m2, rtol=1e-12, atol=1e-12 * one.moments.m2.max())
    np.testing.assert_allclose(two.moments.mean, one.moments.mean, rtol=1e-12, atol=1e-14)
    assert len(two.groups) == len(one.groups) == 4
    assert two.moments.norms.rows == one.moments.norms.rows == 72


def test_the_trainer_callback_writes_a_snapshot_every_n_steps(tmp_path):
    from types import SimpleNamespace

    from spectra_cli.capturing.callbacks import SpectraTrainerCallback

    model, batches = _bert(), _batches()
    cb = SpectraTrainerCallback(tmp_path / "run", modules="encoder.layer.1", every=2, groups=2)
    cb.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    for step, kw in enumerate(batches, 1):
        with torch.no_grad():
            model(**kw)
        cb.on_step_end(None, SimpleNamespace(global_step=step), None)
    cb.on_train_end(None, SimpleNamespace(global_step=4), None)
    assert sorted(os.listdir(tmp_path / "run")) == ["step_2", "step_4"] and _no_hooks(model)
    rows = [spectra.Accumulator.load(tmp_path / "run" / s / "encoder.layer.1.npz").n for s in ("step_2", "step_4")]
    assert rows == [sum(int(kw["attention_mask"].sum()) for kw in batches[a:a + 2]) for a in (0, 2)]  # (reset)


def _model_folder(tmp_path):
    """A tiny BERT and its tokenizer saved as a local Hugging Face folder."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"the a cat dog sat on mat ran far and".split()]
    tok = transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    assert tok("the cat sat")["input_ids"] == [2, 5, 7, 9, 3]  # (no word is unknown)
    folder = tmp_path / "model"
    _bert(vocab=len(words)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_the_command_runs_a_model_folder_over_texts(cli, tmp_path):
    import json

    folder = _model_folder(tmp_path)
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\n\nthe dog ran far\na cat and a dog\n")
    r = cli("capture", str(folder), "--texts", str(texts), "--modules", "encoder.layer.*", "-o", str(tmp_path / "m"),
            "--groups", "0", "--batch-size", "2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["texts"] == 3 and doc["tokens"] == 6 + 2 + 5 + 2 + 4 + 2  # words, CLS and SEP of each
    assert [m["module"] for m in doc["modules"]] == ["encoder.layer.0", "encoder.layer.1"]
    assert spectra.Accumulator.load(tmp_path / "m" / "encoder.layer.0.npz").n == doc["tokens"]
    r = cli("capture", str(tmp_path), "--texts", str(texts), "--modules", "x", "-o", str(tmp_path / "m"))
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith(f"error: {tmp_path} has no config.json;")
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli("capture", str(folder), "--texts", str(tmp_path / "none.txt"), "--modules", "x", "-o", str(tmp_path / "m"))
    assert r.exit_code == 2 and "is not a file" in r.stderr


def test_float32_products_are_within_their_floor_and_said_so():
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.0", precision="float32", groups=2) as cap, torch.no_grad():
        hidden = [model(**kw, output_hidden_states=True).hidden_states[1][kw["attention_mask"] > 0] for kw in batches]
    H = torch.cat(hidden).double().numpy()
    ref = np.sort(np.linalg.eigvalsh(np.cov(H.T)))[::-1]
    rep = spectra.fit(cap["encoder.layer.0"], window="3:12")
    np.testing.assert_allclose(rep.spectrum.eigenvalues[:10], ref[:10], rtol=1e-5)
    assert rep.to_dict()["options"]["precision"] == "float32"  # (the moments' own precision, reported)


def test_the_lightning_callback_writes_a_snapshot_every_n_steps(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from spectra_cli.capturing.callbacks import SpectraLightningCallback
    from tests.capturing.lightning_run import fit_tiny

    cb = SpectraLightningCallback(tmp_path / "run", modules="body", every=2)
    fit_tiny(pl, cb, tmp_path, d_in=8, d_hidden=6, rows=40, batch=10)
    assert sorted(os.listdir(tmp_path / "run")) == ["step_2", "step_4"]
    assert [spectra.Accumulator.load(tmp_path / "run" / s / "body.npz").n for s in ("step_2", "step_4")] == [20, 20]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (CI has none)")
def test_on_a_gpu_the_moments_are_the_cpu_ones():
    model, batches = _bert(), _batches()
    on = {}
    for device in ("cpu", "cuda"):
        m = model.to(device)
        with spectra.capture(m, modules="encoder.layer.1", groups=2) as cap, torch.no_grad():
            for kw in batches:
                m(**{k: v.to(device) for k, v in kw.items()})
        on[device] = cap["encoder.layer.1"].moments
    np.testing.assert_allclose(on["cuda"].m2, on["cpu"].m2, rtol=1e-5, atol=1e-6 * on["cpu"].m2.max())


def _unpadded(batches) -> int:
    return sum(int(kw["attention_mask"].sum()) for kw in batches)


def test_the_mask_is_read_where_the_model_is_called_and_forgotten_after(tmp_path):
    model, batches = _bert(), _batches()

    class Wrapper(torch.nn.Module):  # (a LightningModule holding the model: the mask reaches the inner call)
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, kw):
            return self.model(**kw)

    wrapper = Wrapper()
    with spectra.capture(wrapper, modules="model.encoder.layer.0") as cap, torch.no_grad():
        for kw in batches:
            wrapper(kw)
    assert cap.rows("model.encoder.layer.0") == _unpadded(batches)
    with spectra.capture(model, modules="encoder.layer.0") as cap, torch.no_grad():  # the mask by position
        for kw in batches:
            model(kw["input_ids"], kw["attention_mask"])
    assert cap.rows("encoder.layer.0") == _unpadded(batches)
    with spectra.capture(model, modules="encoder.layer.0") as cap, torch.no_grad():
        model(**batches[0])
        h = torch.randn(*batches[0]["input_ids"].shape, 32)
        model.encoder.layer[0](h)  # a direct call of the module: no mask from the model's last call
    assert cap.rows("encoder.layer.0") == _unpadded(batches[:1]) + h.shape[0] * h.shape[1]
    float_mask = batches[0]["attention_mask"].double()
    float_mask[0, 0] = float("nan")  # (a NaN is no token)
    with spectra.capture(model, modules="encoder.layer.0") as cap, torch.no_grad():
        model(input_ids=batches[0]["input_ids"], attention_mask=batches[0]["attention_mask"])
    with pytest.raises(InputError, match="returns a tensor: output=0 would index its batch"):
        with spectra.capture(model, modules="encoder.layer.0", output=0), torch.no_grad():
            model(**batches[0])
    assert _no_hooks(model)


def test_a_module_that_saw_no_row_is_left_out_of_a_snapshot_and_the_reset_holds(tmp_path):
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.*") as cap, torch.no_grad():
        model(**batches[0])
        cap.save(tmp_path, step=1, reset=True)
        model.encoder.layer[0](torch.randn(2, 5, 32))  # only layer 0 runs: layer 1 is idle in this window
        written = cap.save(tmp_path, step=2, reset=True)
        assert [os.path.basename(p) for p in written] == ["encoder.layer.0.npz"]
        assert cap.rows("encoder.layer.0") == 0
        with pytest.raises(InputError, match="no captured module saw a row since the last snapshot"):
            cap.save(tmp_path, step=3)
    assert spectra.Accumulator.load(tmp_path / "step_2" / "encoder.layer.0.npz").n == 10


def test_callbacks_check_their_keywords_at_once_and_never_leave_hooks(tmp_path):
    from types import SimpleNamespace

    from spectra_cli.capturing.callbacks import SpectraTrainerCallback

    with pytest.raises(OptionError, match="foo: not a keyword of spectra_cli.capture in a training callback"):
        SpectraTrainerCallback(tmp_path, modules="encoder.layer.*", foo=1)
    with pytest.raises(OptionError, match="reset='no' must be"):
        SpectraTrainerCallback(tmp_path, modules="encoder.layer.*", reset="no")
    model = _bert()
    cb = SpectraTrainerCallback(tmp_path, modules="encoder.layer.*")
    cb.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    cb.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)  # train() again after a failure
    assert sum(len(m._forward_hooks) for m in model.modules()) == 2 + 3  # layers, and the model and encoder's
    cb.on_train_end(None, SimpleNamespace(global_step=0), None)  # (no row seen: no snapshot, no error)
    assert _no_hooks(model) and not os.listdir(tmp_path)


def test_the_command_refuses_what_it_cannot_run_in_one_line(cli, tmp_path):
    folder = _model_folder(tmp_path)
    texts = tmp_path / "t.txt"
    texts.write_text(("the cat sat on the mat " * 40).strip() + "\nthe dog\n")  # 240 words: past the 64 positions
    out = tmp_path / "m"
    r = cli("capture", str(folder), "--texts", str(texts), "--modules", "encoder.layer.*", "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr  # (--max-length 512 is cut to the model's 64 positions)
    assert json.loads(r.stdout)["tokens"] == 64 + 4
    for args, message in [
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "cuda:999"],
         "is not a device this torch can use"),
        (["--device", "meta"], "the meta device holds no values to capture"),
        (["--modules", "(layer)\\1"], "uses a back-reference or look-around"),
        (["--positions", "5:2"], "--positions '5:2' selects no position"),
    ]:
        base = ["capture", str(folder), "--texts", str(texts), "--modules", "encoder.layer.*", "-o", str(out)]
        if args[0] == "--modules":
            base = base[:5] + [args[1]] + base[6:]
            args = []
        r = cli(*base, *args)
        assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, (args, r.stderr)
        assert message in r.stderr, r.stderr
    (tmp_path / "file").write_text("x")
    r = cli("capture", str(folder), "--texts", str(texts), "--modules", "encoder.layer.*", "-o", str(tmp_path / "file"))
    assert r.exit_code == 2 and r.stderr.startswith("error: -o ") and "exists and is not a directory" in r.stderr
    big = tmp_path / "big"
    _bert(vocab=120).save_pretrained(big)  # a model of 120 token ids with the 15-token tokenizer beside it
    transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(big)
    r = cli("capture", str(big), "--texts", str(texts), "--modules", "encoder.layer.*", "-o", str(out))
    assert r.exit_code == 2 and "its tokenizer has 15 tokens for a model of 120" in r.stderr


def test_weighted_capture_is_the_weighted_covariance_and_the_host_accumulators(tmp_path):
    # weights per token (counts, probabilities): E^T (diag p - p p^T) E with p = w / sum w, as fit(weights=) has it
    model, batches = _bert(), _batches()
    g = torch.Generator().manual_seed(3)
    token_w = [torch.rand(kw["input_ids"].shape, generator=g, dtype=torch.float64) * 3 for kw in batches]
    token_w[1][0, :4] = 0.0  # (rows of weight 0: counted, never weighed)
    calls = iter(token_w)
    with spectra.capture(model, modules="encoder.layer.1", precision="float64", groups=2,
                         weights=lambda args, kwargs: next(calls)) as cap, torch.no_grad():
        hidden = [model(**kw, output_hidden_states=True).hidden_states[2] for kw in batches]
    rows = [h[kw["attention_mask"] > 0].double().numpy() for h, kw in zip(hidden, batches, strict=True)]
    ws = [w[kw["attention_mask"] > 0].numpy() for w, kw in zip(token_w, batches, strict=True)]
    X, w = np.concatenate(rows), np.concatenate(ws)
    acc = cap["encoder.layer.1"]
    p = w / w.sum()
    mu = p @ X
    ref = (X - mu).T @ ((X - mu) * p[:, None])
    got = acc.moments.second_moment_matrix()
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    assert acc.moments.weighted and acc.moments.n == len(X) and acc.moments.n_positive == int((w > 0).sum())
    assert acc.weight_sq_sum == pytest.approx(float(w @ w), rel=1e-12)
    host = spectra.Accumulator(X.shape[1], groups=2, block_rows=10**6)
    for r, ww in zip(rows, ws, strict=True):
        host.update(r, ww)
    np.testing.assert_allclose(acc.moments.m2, host.moments.m2, rtol=1e-10, atol=1e-12 * np.abs(host.moments.m2).max())
    assert acc.moments.norms.rows == host.moments.norms.rows and acc.moments.norms.coordinate_fourth is None
    assert acc.cosine.mean_cosine() == pytest.approx(host.cosine.mean_cosine(), rel=1e-9)
    np.testing.assert_allclose(spectra.fit(acc, window="3:12").spectrum.eigenvalues,
                               spectra.fit(X, weights=w, window="3:12").spectrum.eigenvalues, rtol=1e-9, atol=1e-12)
    with pytest.raises(InputError, match="the weights have shape"):
        with spectra.capture(model, modules="encoder.layer.1", weights=lambda a, k: torch.ones(2)), torch.no_grad():
            model(**batches[0])
    with pytest.raises(InputError, match="the weights hold a negative, NaN or infinite value"):
        with spectra.capture(model, modules="encoder.layer.1",
                             weights=lambda a, k: -torch.ones(k["input_ids"].shape)), torch.no_grad():
            model(**batches[0])
    assert _no_hooks(model)


def test_a_snapshot_without_a_step_is_a_model_page_and_with_steps_a_run(tmp_path):
    # its moment files are named for the modules (encoder.layer.5.npz): the layers' digits were read as steps
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.*") as cap, torch.no_grad():
        model(**batches[0])
        cap.save(tmp_path / "m")
        cap.save(tmp_path / "run", step=10, reset=True)
        model(**batches[1])
        cap.save(tmp_path / "run", step=20)
    spectra.batch(str(tmp_path / "m"), window="3:12", jsonl=tmp_path / "layers.jsonl")
    page = spectra.report(str(tmp_path / "layers.jsonl"), out=str(tmp_path / "layers.html"))
    assert page.kind == "model"
    spectra.batch([str(tmp_path / "run" / "step_10"), str(tmp_path / "run" / "step_20")], window="3:12",
                  jsonl=tmp_path / "run.jsonl")
    page = spectra.report(str(tmp_path / "run.jsonl"), out=str(tmp_path / "run.html"))
    assert page.kind == "run"
    lines = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert {(d["source"]["capture"]["module"], d["source"]["capture"]["step"]) for d in lines} == {
        (m, s) for m in ("encoder.layer.0", "encoder.layer.1") for s in (10, 20)}


def test_check_gates_a_snapshot_against_an_earlier_one(tmp_path):
    model, batches = _bert(), _batches()
    with spectra.capture(model, modules="encoder.layer.1", precision="float64") as cap, torch.no_grad():
        model(**batches[0])
        model(**batches[1])
        cap.save(tmp_path / "run", step=1)
        model(**batches[2])
        cap.save(tmp_path / "run", step=2)
    first, second = (tmp_path / "run" / f"step_{s}" / "encoder.layer.1.npz" for s in (1, 2))
    base = tmp_path / "base.json"
    base.write_text(json.dumps(spectra.fit(str(first), window="3:12").to_dict()))
    same = spectra.check(str(first), baseline=str(base), max_change=["rank.participation_ratio=1e-9"], window="3:12")
    moved = spectra.check(str(second), baseline=str(base), max_change=["rank.participation_ratio=1e-9"],
                          window="3:12")
    assert same.passed and not moved.passed


def test_the_device_and_the_host_make_norms_unbiased_the_same_way():
    """The running-mean form in torch (capture) and in numpy (the pass), weighted and not, one row dominating."""
    from spectra_cli.capturing.device import _unbiased_about_running_mean as on_device
    from spectra_cli.stream.moments import _unbiased_about_running_mean as on_host

    rng = np.random.default_rng(0)
    u, w = rng.gamma(2.0, 1.0, 50), rng.uniform(0.1, 5.0, 50)
    w[0] = 200.0  # (its share of the mean: 1 - s2 alone would be off)
    total, sq = float(w.sum()) + 300.0, float(w @ w) + 300.0
    np.testing.assert_allclose(on_device(torch.tensor(u), torch.tensor(w), 50, total, sq).numpy(),
                               on_host(u * w, w, w / total, sq / total ** 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(on_device(torch.tensor(u), None, 50, 350.0, 350.0).numpy(),
                               on_host(u, None, np.full(50, 1 / 350), 1 / 350), rtol=1e-12, atol=1e-14)

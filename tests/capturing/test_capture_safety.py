"""A model folder is an input written by someone else: capture runs none of its code (its own modules named by
``auto_map``, a pickle's ``__reduce__``), reads nothing from stdin, writes nothing onto its inputs or into the
model's folder, gives every module a file of its own, and sizes its moments before allocating them."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the capture extra (torch) is installed by the test extras")
transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

import spectra_cli as spectra  # noqa: E402
from spectra_cli.capturing.hooks import file_name  # noqa: E402
from spectra_cli.errors import InputError, OptionError, OutputError  # noqa: E402

pytestmark = pytest.mark.slow  # (the default run does not even import this module: tests/conftest.py)

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"the a cat dog sat on mat ran far and".split()]


def _bert(folder, *, config_extra=None, tokenizer_extra=None, weights="safetensors"):
    """A tiny BERT and its tokenizer saved as a local folder, its config.json and tokenizer_config.json then
    given the extra keys (a planted auto_map, a hub kernel), its weights as safetensors or as a pickle."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(cfg).save_pretrained(folder)
    transformers.BertTokenizer(vocab={w: i for i, w in enumerate(WORDS)}).save_pretrained(folder)
    for name, extra in (("config.json", config_extra), ("tokenizer_config.json", tokenizer_extra)):
        if extra:
            doc = json.loads((folder / name).read_text())
            doc.update(extra)
            (folder / name).write_text(json.dumps(doc))
    if weights == "pickle":
        (folder / "model.safetensors").unlink()
    return folder


def _plant(folder, marker):
    """The folder's own code: a module that writes ``marker`` when it is imported, and a pickle that writes it
    when it is unpickled."""
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    (folder / "planted.py").write_text(code + "from transformers import BertConfig as PlantedConfig, "
                                              "BertModel as PlantedModel, BertTokenizer as PlantedTokenizer\n")

    class Payload:
        def __reduce__(self):
            return (exec, (code,))

    import pickle

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Payload()}))


def _spectra(*args, stdin=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run([sys.executable, "-m", "spectra_cli", *map(str, args)], stdin=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture
def texts(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("the cat sat on the mat\nthe dog ran far\n")
    return p


AUTO_MAP = {"AutoConfig": "planted.PlantedConfig", "AutoModel": "planted.PlantedModel"}


def test_a_folder_that_needs_its_own_code_is_refused_and_runs_nothing(tmp_path, texts):
    marker = tmp_path / "ran.txt"
    own = _bert(tmp_path / "own", config_extra={"model_type": "planted_model", "auto_map": AUTO_MAP})
    _plant(own, marker)
    out = tmp_path / "m"
    base = ["capture", own, "--texts", texts, "--modules", "encoder.layer.*", "-o", out]
    # 'yes |' on stdin: transformers asked there whether to run the folder's code, and ran it on "y"
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as yes:
        r = _spectra(*base, stdin=yes.stdout)
        yes.kill()
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert "needs its own code" in r.stderr and "never runs code from a model folder" in r.stderr
    # on a terminal: no prompt, no 15 s wait for an answer
    main, tty = pty.openpty()
    try:
        os.write(main, b"y\ny\ny\n")
        start = time.monotonic()
        r = _spectra(*base, stdin=tty)
        assert time.monotonic() - start < 60
    finally:
        os.close(main)
        os.close(tty)
    assert r.returncode == 2 and r.stdout == "" and "needs its own code" in r.stderr
    # the library, with a "y" waiting on stdin
    saved = sys.stdin
    import io

    sys.stdin = io.StringIO("y\n" * 10)
    try:
        with pytest.raises(InputError, match="needs its own code"):
            spectra.capture(own, modules="encoder.layer.*", texts=texts)
    finally:
        sys.stdin = saved
    assert not marker.exists() and not out.exists()


def test_a_known_model_with_planted_code_runs_the_built_in_class_only(tmp_path, texts):
    # a BERT whose config and tokenizer config also name the folder's code, and whose config asks for a hub kernel:
    # transformers' own BertModel and BertTokenizer are loaded, with torch's attention
    marker = tmp_path / "ran.txt"
    folder = _bert(tmp_path / "bert", config_extra={"auto_map": AUTO_MAP,
                                                    "attn_implementation": "kernels-community/flash-attn"},
                   tokenizer_extra={"auto_map": {"AutoTokenizer": ["planted.PlantedTokenizer", None]}})
    _plant(folder, marker)
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as yes:
        r = _spectra("capture", folder, "--texts", texts, "--modules", "encoder.layer.*", "-o", tmp_path / "m",
                     "--groups", "0", "--json", stdin=yes.stdout)
        yes.kill()
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc = json.loads(r.stdout)
    assert doc["tokens"] == 8 + 6 and [m["module"] for m in doc["modules"]] == ["encoder.layer.0", "encoder.layer.1"]
    assert not marker.exists()


def test_pickled_weights_are_refused_with_the_conversion_named(tmp_path, texts):
    marker = tmp_path / "ran.txt"
    folder = _bert(tmp_path / "bin", weights="pickle")
    _plant(folder, marker)
    with pytest.raises(InputError, match=r"keeps its weights as pytorch_model\.bin, a pickle .* capture reads "
                                         r"\*\.safetensors only: convert them once"):
        spectra.capture(folder, modules="encoder.layer.*", texts=texts)
    assert not marker.exists()


def test_outputs_never_land_on_inputs_and_are_checked_before_the_model_loads(tmp_path, texts, monkeypatch):
    folder = _bert(tmp_path / "bert")
    from spectra_cli.capturing import command as run

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(run, "_load", never)
    for out, message in [(folder, "is inside the model folder"), (folder / "sub", "is inside the model folder")]:
        with pytest.raises(OutputError, match=message):
            spectra.capture(folder, modules="encoder.layer.*", texts=texts, out=out)
    # texts named as a moment file in the output folder: refused before it is replaced
    R = tmp_path / "R"
    R.mkdir()
    victim = R / "encoder.layer.0.npz"
    victim.write_text("the cat sat\n")
    with pytest.raises(OutputError, match="holds the texts file"):
        spectra.capture(folder, modules="encoder.layer.*", texts=victim, out=R)
    assert victim.read_text() == "the cat sat\n"
    # -o DIR --step N where DIR/step_N is a file: said at once, naming -o
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "step_3").write_text("x")
    with pytest.raises(OutputError, match=r"out=.*step_3 exists and is not a directory"):
        spectra.capture(folder, modules="encoder.layer.*", texts=texts, out=tmp_path / "run", step=3)
    for kwargs, message in [({"batch_size": 10**23}, "batch_size=.* must be at most 65,536"),
                            ({"precision": "float16"}, "precision"),
                            ({"groups": 10**6}, "groups=1000000 must be at"),
                            ({"positions": "5:2"}, "selects no position"),
                            ({"device": "gpu9"}, "is not a torch device"),
                            ({"modules": "(a)\\1"}, "back-reference"),
                            ({"attention": "kernels-community/x"}, "attention"),
                            ({"max_length": 10**9}, "max_length=.* must be at most")]:
        with pytest.raises(OptionError, match=message):
            spectra.capture(folder, **{"modules": "encoder.layer.*", "texts": texts, **kwargs})


def test_a_bad_option_is_refused_in_seconds_on_a_large_model_folder(tmp_path, texts):
    # a folder whose weights would take minutes to load: the refusal comes before torch is even imported
    folder = _bert(tmp_path / "big")
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(1 << 30)  # (sparse: a GiB of weights that are never read)
    for args in (["--precision", "float8"], ["--modules", "(x)\\1"], ["--positions", "9:1"], ["--groups", "-1"],
                 ["--device", "tpu:0"], ["--batch-size", "100000000"]):
        start = time.monotonic()
        base = ["capture", folder, "--texts", texts, "--modules", "encoder.layer.*", "-o", tmp_path / "m"]
        if args[0] == "--modules":
            base[5] = args[1]
            args = []
        r = _spectra(*base, *args)
        assert time.monotonic() - start < 2 + 3, args  # (2 s of refusal, and the interpreter's start on a busy CI)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, (args, r.stderr)


def test_snapshot_names_are_one_file_per_module():
    names = ["a b", "a_b", "a/b", "a\\b", "é", "è", "x" * 250, "x" * 250 + "y", ".hidden", "..", "a%20b", "~"]
    stems = [file_name(n) for n in names]
    assert len(set(stems)) == len(names) and len({s.casefold() for s in stems}) == len(names)
    assert stems[:6] == ["a%20b", "a_b", "a%2Fb", "a%5Cb", "%C3%A9", "%C3%A8"]
    assert all(len(s) <= 200 and "/" not in s and not s.startswith(".") for s in stems)
    assert file_name("encoder.layer.0") == "encoder.layer.0" and file_name("h.0.attn.c_proj") == "h.0.attn.c_proj"


class _Named(torch.nn.Module):
    """Modules whose names differ only where a file name cannot tell them apart (a ModuleDict takes any string)."""

    def __init__(self, names):
        super().__init__()
        self.parts = torch.nn.ModuleDict({n: torch.nn.Linear(3, 3) for n in names})

    def forward(self, x):
        return sum(m(x) for m in self.parts.values())


def test_modules_whose_names_differ_only_in_unsafe_characters_get_a_file_each(tmp_path):
    names = ["a b", "a_b", "a-b", "é", "è", "z" * 230, "z" * 230 + "q"]
    model = _Named(names)
    with spectra.capture(model, modules="parts.*", groups=0) as cap, torch.no_grad():
        model(torch.randn(20, 3))
    paths = cap.save(tmp_path / "out")
    assert len(set(paths)) == len(names) == len(os.listdir(tmp_path / "out"))
    for name, path in zip(cap.modules, paths, strict=True):
        assert spectra.Accumulator.load(path).sources[0]["capture"] == name


def test_capture_sizes_its_moments_before_allocating_them(tmp_path):
    wide = torch.nn.Linear(4, 40_000)
    with pytest.raises(InputError, match=r"capture: 1 module\(s\) of width up to 40,000 with groups=32 needs about "
                                         r"1,5\d\d GiB .* the memory budget is .* max_memory .* fewer modules or "
                                         r"fewer groups"):
        spectra.capture(torch.nn.Sequential(wide), modules="0", groups=32)
    # a module whose width shows only when it runs: refused at its first call, before its state is allocated
    class Widen(torch.nn.Module):
        def forward(self, x):
            return x.repeat(1, 3000)

    model = torch.nn.Sequential(Widen())
    cap = spectra.capture(model, modules="0", groups=4, max_memory="100MB")
    with cap, torch.no_grad(), pytest.raises(InputError, match=r"module '0' \(width 6,000\) with groups=4 needs about"):
        model(torch.randn(8, 2))
    assert not cap.active


def test_texts_are_read_in_bounded_pieces(tmp_path):
    from spectra_cli.capturing.command import MAX_TEXT_CHARS, _texts

    long = tmp_path / "long.txt"
    with open(long, "w") as f:
        f.write("a" * (3 * MAX_TEXT_CHARS + 5) + "\nthe cat\n\n")
    got = list(_texts(str(long), "text"))
    assert [len(t) for t in got] == [MAX_TEXT_CHARS, 7]
    jl = tmp_path / "t.jsonl"
    jl.write_text(json.dumps({"text": "x" * 10}) + "\n" + "{" + " " * (5 << 20) + "}\n")
    with pytest.raises(InputError, match="line 2 is longer than"):
        list(_texts(str(jl), "text"))
    # a small Parquet file whose one long text repeats on every row stays small as it is read
    import pyarrow as pa
    import pyarrow.parquet as pq

    repeated = pa.DictionaryArray.from_arrays(pa.array(np.zeros(2_000, dtype=np.int32)), pa.array(["b" * 1_000_000]))
    pq.write_table(pa.table({"text": repeated}), tmp_path / "t.parquet", compression="zstd")  # (2 GB as strings)
    assert os.path.getsize(tmp_path / "t.parquet") < 100_000
    lengths = {len(t) for t in _texts(str(tmp_path / "t.parquet"), "text")}
    assert lengths == {MAX_TEXT_CHARS}
    pq.write_table(pa.table({"n": np.arange(3)}), tmp_path / "n.parquet")
    with pytest.raises(InputError, match="column 'n' holds int64, not text"):
        list(_texts(str(tmp_path / "n.parquet"), "n"))


def test_an_index_never_leads_to_a_pickle_a_fifo_or_a_file_elsewhere(tmp_path, texts):
    from safetensors.torch import load_file

    for target, message in [("real.bin", "capture reads weights only from .safetensors files beside the index"),
                             ("sub/f.safetensors", "is a FIFO"), ("../x.safetensors", "beside the index")]:
        folder = _bert(tmp_path / f"m{len(target)}")
        (folder / "model.safetensors").rename(folder / "x.safetensors")
        sd = load_file(folder / "x.safetensors")
        if target == "real.bin":
            torch.save(sd, folder / "real.bin")  # (a valid state dict: transformers loaded it, unpickled)
        if target.startswith("sub/"):
            (folder / "sub").mkdir()
            os.mkfifo(folder / "sub" / "f.safetensors")  # (it blocked the load for ever)
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict.fromkeys(sd, target)}))
        start = time.monotonic()
        with pytest.raises(InputError, match=message):
            spectra.capture(folder, modules="encoder.layer.*", texts=texts)
        assert time.monotonic() - start < 30


def test_the_model_is_sized_as_its_config_declares_it_before_it_loads(tmp_path, texts):
    # weights of a few KB and a config of 1,000 layers of 20,000: loading filled 3 GB at random past --max-memory
    folder = _bert(tmp_path / "declared")
    config = json.loads((folder / "config.json").read_text())
    config.update(num_hidden_layers=1000, intermediate_size=20000)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"the model .* \(as its config.json declares it\) needs about 2.\d+ GiB"):
        spectra.capture(folder, modules="encoder.layer.0", texts=texts, max_memory="300MB")


def test_hostile_texts_and_outputs_are_one_line_before_the_model_runs(tmp_path, cli):
    folder = _bert(tmp_path / "bert")
    lone = tmp_path / "lone.jsonl"
    lone.write_text('{"text": "\\ud800 the cat"}\n')  # (a lone surrogate escape: the tokenizer raised a TypeError)
    r = cli("capture", folder, "--texts", lone, "--modules", "encoder.layer.*", "-o", tmp_path / "o1", "--json")
    assert r.exit_code == 0, r.stderr
    (tmp_path / "afile").write_text("x")
    r = cli("capture", folder, "--texts", lone, "--modules", "encoder.layer.*", "-o", tmp_path / "afile" / "sub")
    assert r.exit_code == 2 and r.stderr.startswith("error: -o ") and "is a file, so no folder can be made" in r.stderr
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": ["a", "b"]}), tmp_path / "nocol.parquet")
    r = cli("capture", folder, "--texts", tmp_path / "nocol.parquet", "--modules", "encoder.layer.*", "-o",
            tmp_path / "o2")
    assert r.exit_code == 2 and r.stderr == (f"error: {tmp_path / 'nocol.parquet'} has no column 'text' (columns: x); "
                                             "name the text column with --column.\n")


def test_a_sharded_folder_with_a_bin_index_beside_its_safetensors_index_loads(tmp_path, texts):
    # Hub snapshots ship both indexes; with safetensors only, the .bin index is never read
    from safetensors.torch import load_file, save_file

    folder = _bert(tmp_path / "sharded")
    sd = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(sd)
    halves = {f"model-0000{i + 1}-of-00002.safetensors": keys[i::2] for i in range(2)}
    for shard, part in halves.items():
        save_file({k: sd[k] for k in part}, folder / shard, metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": {k: shard for shard, part in halves.items() for k in part}}))
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0},
         "weight_map": {k: shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
                        for shard, part in halves.items() for k in part}}))
    cap = spectra.capture(folder, modules="encoder.layer.*", texts=texts, groups=0)
    assert cap.tokens_read == 14

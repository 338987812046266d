"""What the documentation's examples need to run as written, in a scratch folder: a small shell for their
command lines, the files they name (small, under the names the pages use), the Python names a reader brings
(``X``, ``model``, ``loader`` ...), and the few lines that cannot run here, each with why. The setup lives
here, per page, not in the pages: what a reader sees is what a user types.

The shell knows what the pages use and refuses the rest, so a new kind of line fails loudly instead of
being skipped: words with ``'`` and ``"`` quotes, unquoted globs expanded as bash does (no match: the word
as written), ``#`` comments, ``&&``, ``|`` and ``> FILE``; the commands ``spectra`` (in this process through
Click's runner, or the installed console script for the ``$`` lines of ``console`` blocks) and ``jq`` with a
dotted path (a path that the document lacks, or that is null, fails the example: what a page shows must be
there)."""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import powerlaw_matrix

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@dataclass(frozen=True)
class Block:
    page: str  # relative to docs/ ("README.md" is the repository's)
    lang: str
    code: str
    line: int  # the page's line of the block's first line


def page_text(page: str) -> str:
    return (ROOT / page if page == "README.md" else DOCS / page).read_text()


def blocks(page: str) -> list[Block]:
    text = page_text(page)
    return [Block(page, m.group(1) or "", m.group(2), text.count("\n", 0, m.start()) + 2)
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))]


# --- What cannot run here ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotRun:
    """A command (its first words) or a Python statement (its first characters) of a page that the tests do
    not run, why, and the words of its line (or of its block) that tell the reader so."""

    page: str
    start: str
    why: str
    said: str


NOT_RUN = (
    NotRun("README.md", "python3 -m pip install", "installs the package (a network; the tests run inside that "
           "install)", "pip install"),
    NotRun("README.md", "python3 -m pytest", "the test suite itself, this test among them", "pytest"),
    NotRun("README.md", "mkdocs build --strict", "the strict build is "
           "test_the_site_builds_strict_and_its_cli_reference_has_every_option", "mkdocs build --strict"),
    NotRun("README.md", "python bench/bench_spectrum.py", "a benchmark (minutes), not a test", "benchmarks"),
    NotRun("commands.md", "spectra batch hf://", "reads a repository of the Hugging Face Hub: a network",
           "a Hub repository"),
    NotRun("development.md", "python3 -m pip install", "installs the package (a network)", "pip install"),
    NotRun("development.md", "python3 -m pytest", "the test suite itself, this test among them", "pytest"),
    NotRun("development.md", "python bench/bench_spectrum.py", "a benchmark (minutes), not a test",
           "not part of the tests"),
    NotRun("development.md", "python bench/snapshot_reports.py", "a maintainer's tool around a refactoring: "
           "every command over sample_data through the installed spectra, a minute", "refactoring"),
    NotRun("figures.md", "python bench/make_real_checkpoint.py", "builds its checkpoint from MiniLM activation "
           "dumps that are not shipped (the next lines run on a small checkpoint of that name)", "not shipped"),
    NotRun("guides/capture.md", "pip install", "installs from a package index (a network)", "pip install"),
    NotRun("guides/ci.md", "python -m pip install spectra-geometry", "installs from a package index (a network)",
           "pip install"),
    NotRun("guides/ci.md", "python scripts/dump_activations.py", "the reader's own script (the dump it writes, "
           "dumps/layer12.npy, is made here)", "your model's dump"),
    NotRun("guides/notebooks.md", 'spectra.fit("s3://', "an S3 bucket and a Dask scheduler: a network", "s3://"),
    NotRun("guides/notebooks.md", 'spectra.fit(mlp, window="11:1049", top=2000)', "the top-k route (and its "
           "rank.bounds) is taken for at most d/8 leading eigenvalues: top=2000 needs a matrix 16,000 wide, 2 GB of "
           "moments (tests/eigen/test_top.py checks rank.bounds on that route)", "16,384 wide"),
)

#: Sizes an example names that would take the tests half a minute, run smaller: (page, as written, as run).
#: The rest of the line runs as written.
SMALLER = (("commands.md", "-n 50000 -d 1024", "-n 400 -d 32"),)


# --- The shell --------------------------------------------------------------------------------------------


@dataclass
class Word:
    text: str
    quoted: bool = False


def _tokens(line: str) -> list[Word | str]:
    """Words and the operators ``&&``, ``|``, ``>`` of one command line, up to its ``#`` comment."""
    out: list[Word | str] = []
    word: Word | None = None
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = None
            else:
                assert word is not None
                word.text += c
        elif c in "'\"":
            quote, word = c, word or Word("")
            word.quoted = True
        elif c.isspace() or c in "|>" or line.startswith("&&", i):
            if word is not None:
                out.append(word)
                word = None
            if c in "|>" or c == "&":
                out.append("&&" if c == "&" else c)
                i += c == "&"
        elif c == "#" and word is None:
            break
        else:
            assert c not in "$;<`&\\", f"the examples' shell does not know {c!r}: {line}"
            word = word or Word("")
            word.text += c
        i += 1
    assert quote is None, f"an unclosed quote: {line}"
    if word is not None:
        out.append(word)
    return out


def _split(tokens: list[Word | str], operator: str) -> list[list[Word | str]]:
    """The runs of ``tokens`` between the operators ``operator`` (``&&`` between commands, ``|`` between stages)."""
    runs: list[list[Word | str]] = [[]]
    for t in tokens:
        if t == operator:
            runs.append([])
        else:
            runs[-1].append(t)
    return runs


def _expanded(words: list[Word]) -> list[str]:
    argv: list[str] = []
    for w in words:
        matches = sorted(glob.glob(w.text)) if not w.quoted and any(c in w.text for c in "*?[") else []
        argv.extend(matches or [w.text])
    return argv


def _jq(argv: list[str], stdin: str) -> tuple[int, str, str]:
    args = argv[1:]
    assert len(args) == 1 + ("-e" in args) and re.fullmatch(r"(\.\w+)+", args[-1]), f"jq {args}: a dotted path only"
    value: Any = json.loads(stdin)
    for key in args[-1][1:].split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return (1 if value is None or value is False else 0), json.dumps(value) + "\n", ""


@dataclass
class Shell:
    page: str
    cwd: Path
    invoke: Callable[[list[str], str | None], tuple[int, str, str]]  # spectra in this process
    ran: int = 0
    met: list[NotRun] = field(default_factory=list)
    smaller: list[str] = field(default_factory=list)

    def installed(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        spectra = Path(sys.executable).with_name("spectra")
        r = subprocess.run([str(spectra), *argv[1:]], cwd=self.cwd, input=stdin, capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "100"}, timeout=300)
        return r.returncode, r.stdout, r.stderr

    def not_run(self, start: str, line: str, block: str) -> bool:
        for entry in NOT_RUN:
            if entry.page == self.page and start.startswith(entry.start):
                assert entry.said in line or entry.said in block, \
                    f"{self.page}: {line!r} does not say why it is not run ({entry.said!r})"
                self.met.append(entry)
                return True
        return False

    def run(self, line: str, block: str, *, installed: bool = False) -> None:
        """One command line of ``block``; ``installed``: spectra through the installed console script."""
        for page, written, run in SMALLER:
            if page == self.page and written in line:
                line = line.replace(written, run)
                self.smaller.append(written)
        for pipeline in _split(_tokens(line), "&&"):
            stages = _split(pipeline, "|")
            first = " ".join(w.text for w in stages[0] if isinstance(w, Word))
            if not first or self.not_run(first, line, block):
                continue
            stdin: str | None = None
            for stage in stages:
                target = None
                if ">" in stage:
                    at = stage.index(">")
                    assert at == len(stage) - 2 and stage is stages[-1], f"> FILE ends a line: {line}"
                    target, stage = stage[-1], stage[:at]
                argv = _expanded([w for w in stage if isinstance(w, Word)])
                if argv[0] == "spectra":
                    rc, out, err = (self.installed if installed else self.invoke)(argv, stdin)
                elif argv[0] == "jq":
                    assert stdin is not None
                    rc, out, err = _jq(argv, stdin)
                else:
                    raise AssertionError(f"{self.page}: {line!r}: the examples' shell runs spectra and jq; a "
                                         f"line that cannot run here goes into NOT_RUN with why")
                # (spectra check's 1 is its answer, a failed gate, on data too small for the page's thresholds)
                assert rc == 0 or rc == 1 and argv[:2] == ["spectra", "check"], \
                    f"{self.page}: {' '.join(argv)} exited {rc}\n{err[-2000:]}"
                if isinstance(target, Word):
                    (self.cwd / target.text).write_text(out)
                stdin = out
                self.ran += 1

    def python(self, block: Block, scope: dict[str, object]) -> None:
        """A Python block in the page's namespace, statement by statement (a statement in NOT_RUN is not run)."""
        tree = ast.parse(block.code)
        for node in tree.body:
            source = ast.get_source_segment(block.code, node) or ""
            if self.not_run(source, block.code.splitlines()[node.lineno - 1], block.code):
                continue
            module = ast.increment_lineno(ast.Module([node], type_ignores=[]), block.line - 1)
            exec(compile(module, self.page, "exec"), scope)
            self.ran += 1


# --- The files and names the pages use --------------------------------------------------------------------


def rows(n: int, d: int, alpha: float = 0.9, seed: int = 0) -> np.ndarray:
    return powerlaw_matrix(n, d, alpha, seed=seed).astype(np.float32)


def tiny_bert(layers: int = 2, vocab: int = 500) -> Any:
    """The tutorial's small randomly initialised BERT (64 wide), with as many layers as a page names."""
    import torch
    from transformers import BertConfig, BertModel

    torch.set_num_threads(1)  # (a tiny model: two spinning intra-op threads only wait on a busy machine)
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                                intermediate_size=128)).eval()


def loader(batches: int, size: int = 4, length: int = 16) -> list[dict[str, Any]]:
    """What a data loader of a tokenizer's output yields: input ids and an attention mask with padding."""
    import torch

    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(batches):
        mask = torch.ones(size, length, dtype=torch.long)
        mask[0, length // 2:] = 0
        out.append({"input_ids": torch.randint(1, 500, (size, length), generator=g), "attention_mask": mask})
    return out


WORDS = "the a cat dog sat on mat ran far and".split()


class Folder:
    """Makes the files a page names in the scratch folder (small, under those names)."""

    def __init__(self, cwd: Path, spectra: Callable[[list[str], str | None], tuple[int, str, str]]) -> None:
        self.cwd, self.spectra = cwd, spectra

    def path(self, name: str) -> Path:
        p = self.cwd / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def npy(self, name: str, X: np.ndarray) -> None:
        np.save(self.path(name), X)

    def parquet(self, name: str, X: np.ndarray, column: str | None = None) -> None:
        """A vector column (``--column``) or one numeric column per feature."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if column:
            table = pa.table({column: pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])})
        else:
            table = pa.table({f"f{i}": X[:, i] for i in range(X.shape[1])})
        pq.write_table(table, self.path(name))

    def safetensors(self, name: str, tensors: dict[str, np.ndarray]) -> None:
        from safetensors.numpy import save_file

        save_file(tensors, str(self.path(name)))

    def weights(self, name: str, layers: int = 3, seed: int = 0) -> None:
        """A checkpoint: 2-D weights WeightWatcher's convention analyses, and a bias (skipped)."""
        rng = np.random.default_rng(seed)
        t = {f"layer.{i}.weight": rng.standard_normal((96, 64)).astype(np.float32) for i in range(layers)}
        self.safetensors(name, {**t, "layer.0.bias": np.zeros(96, np.float32)})

    def sharded(self, folder: str) -> None:
        """A Hugging Face folder of sharded safetensors with model.safetensors.index.json."""
        rng = np.random.default_rng(1)
        weight_map = {}
        for i in (1, 2):
            shard, name = f"model-0000{i}-of-00002.safetensors", f"layer.{i}.weight"
            self.safetensors(f"{folder}/{shard}", {name: rng.standard_normal((48, 24)).astype(np.float32)})
            weight_map[name] = shard
        index = {"metadata": {}, "weight_map": weight_map}
        self.path(f"{folder}/model.safetensors.index.json").write_text(json.dumps(index))

    def run(self, *argv: str) -> str:
        rc, out, err = self.spectra(["spectra", *argv], None)
        assert rc == 0, (argv, err)
        return out

    def report(self, name: str, X: np.ndarray, *flags: str) -> None:
        """The JSON report of ``spectra fit`` on X (an earlier run's)."""
        self.npy(".input.npy", X)
        self.path(name).write_text(self.run("fit", ".input.npy", "--json", *flags))
        (self.cwd / ".input.npy").unlink()

    def results(self, name: str, *inputs: str) -> None:
        """A batch's JSON Lines over files already here."""
        self.path(name).parent.mkdir(parents=True, exist_ok=True)
        self.run("batch", *inputs, "--jsonl", name)

    def moments(self, name: str, X: np.ndarray) -> None:
        import spectra_cli as spectra

        spectra.accumulate(X).save(self.path(name))

    def model(self, folder: str, texts: str) -> None:
        """A local Hugging Face folder (the tutorial's BERT and a tokenizer of a few words) and texts of them."""
        from transformers import BertTokenizer

        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
        tiny_bert(vocab=len(words)).save_pretrained(self.path(folder))
        BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(self.path(folder))
        rng = np.random.default_rng(0)
        lines = [" ".join(rng.choice(WORDS, int(rng.integers(3, 12)))) for _ in range(24)]
        self.path(texts).write_text("\n".join(lines) + "\n")


def _readme(f: Folder) -> dict[str, object]:
    f.npy("acts.npy", rows(300, 24, seed=1))
    f.report("last_good.json", rows(300, 24, seed=2))
    f.report("base.json", rows(300, 24, seed=3))
    f.report("finetuned.json", rows(300, 24, 1.0, seed=4))
    f.npy("emb.npy", rows(300, 24, seed=5))
    f.npy("ctx.npy", rows(64 * 4, 24, seed=6).reshape(64, 4, 24))
    for step in (100, 200):
        f.npy(f"runs/step_{step}/acts.npy", rows(300, 24, 0.8 + step / 1000, seed=step))
    f.parquet("shard_000.parquet", rows(300, 24, seed=7))
    f.weights("model.safetensors")
    f.weights("base-model/model.safetensors", seed=0)
    f.weights("finetuned/model.safetensors", seed=1)  # (the same layers' names: each layer's change)
    f.model("my-model", "corpus.txt")
    return {"X": rows(300, 24, seed=8)}


def _commands(f: Folder) -> dict[str, object]:
    for name, seed in (("dump.npy", 1), ("acts.npy", 2), ("mlp_acts.npy", 3), ("emb.npy", 4), ("tokens.npy", 5)):
        f.npy(name, rows(300, 24, seed=seed))
    f.parquet("dump.parquet", rows(300, 24, seed=6), column="emb")
    f.parquet("emb.parquet", rows(300, 24, seed=7), column="emb")
    f.parquet("new.parquet", rows(100, 24, seed=8), column="emb")
    f.npy("eigs.npy", np.arange(1, 101.0) ** -1.0)
    f.npy("counts.npy", np.random.default_rng(0).integers(1, 20, 300).astype(np.float64))
    f.npy("z.npy", np.random.default_rng(1).standard_normal(300))
    toml = next(b.code for b in blocks("guides/ci.md") if b.lang == "toml")
    f.path("spectra.toml").write_text(toml)  # the configuration of Gate a build, and a baseline made with it
    f.report("last_good.json", rows(300, 24, seed=9), "--window", "11:38")
    for step in (100, 200):
        f.npy(f"runs/a/step_{step}.npy", rows(300, 24, 0.8 + step / 1000, seed=step))
        f.results(f"runs/step_{step}/results.jsonl", f"runs/a/step_{step}.npy")
    f.safetensors("checkpoint.safetensors", {
        "enc.layer0.attn.weight": rows(48, 24, seed=10), "enc.layer0.mlp.weight": rows(48, 24, seed=11),
        "enc.layer0.attn.bias": np.zeros(48, np.float32)})
    f.weights("model.safetensors")
    f.sharded("ckpt_dir")
    f.report("old.json", rows(300, 24, seed=12))
    f.report("new.json", rows(300, 24, 1.0, seed=13))
    f.npy("ctx.npy", rows(64 * 4, 40, seed=14).reshape(64, 4, 40))  # --project 32: more than 32 features
    f.parquet("shard_000.parquet", rows(300, 24, seed=15))
    f.model("my-model", "corpus.txt")
    return {}


def _figures(f: Folder) -> dict[str, object]:
    f.safetensors("bench/data/minilm_real.safetensors", {
        **{f"encoder.layer.{i}.output": rows(400, 48, 0.7 + 0.1 * i, seed=i).astype(np.float16) for i in range(3)},
        "embeddings.LayerNorm.weight": np.ones(48, np.float32)})
    return {}


def _capture(f: Folder) -> dict[str, object]:
    f.model("my-model", "corpus.txt")
    return {"model": tiny_bert(layers=6), "loader": loader(32)}


def _checkpoints(f: Folder) -> dict[str, object]:
    f.weights("model.safetensors")
    return {}


def _ci(f: Folder) -> dict[str, object]:
    f.npy("dumps/layer12.npy", rows(300, 24, seed=1))
    f.report("baselines/last_good.json", rows(300, 24, seed=2), "--window", "11:38")
    return {}


def _notebooks(f: Folder) -> dict[str, object]:
    from matplotlib.figure import Figure

    f.npy("dump.npy", rows(300, 24, seed=1))
    f.npy("shard_000.npy", rows(300, 24, seed=2))
    f.moments("m0.npz", rows(300, 24, seed=3))
    f.moments("m1.npz", rows(300, 24, seed=4))
    f.weights("model.safetensors")
    f.report("report.json", rows(300, 24, seed=5))
    f.report("old.json", rows(300, 24, seed=6))
    f.report("new.json", rows(300, 24, 1.0, seed=7))
    f.results("weights.jsonl", "model.safetensors")
    return {"X": rows(300, 24, seed=8),
            "ctx": rows(64 * 4, 40, seed=10).reshape(64, 4, 40),  # project=32: more than 32 features
            "ax": Figure().subplots(), "model": tiny_bert(), "loader": loader(8)}


#: Per page with examples: makes the files they name and returns the names their Python takes as given.
SETUP: dict[str, Callable[[Folder], dict[str, object]]] = {
    "README.md": _readme,
    "commands.md": _commands,
    "figures.md": _figures,
    "guides/capture.md": _capture,
    "guides/checkpoints.md": _checkpoints,
    "guides/ci.md": _ci,
    "guides/notebooks.md": _notebooks,
}

#: What some pages' examples write, checked after them (beyond their exit codes).
WRITTEN = {
    "README.md": ("white.npy", "t.npz", "weights.jsonl", "run.html", "m000.npz", "ctx.png", "moments"),
    "commands.md": ("spectrum.png", "spectrum.json", "white.npy", "new_white.parquet", "results.jsonl",
                    "weights.jsonl", "alpha.png", "model.html", "run.html", "report.json", "ctx.png", "x.npy",
                    "rf.npy", "moments"),
    "figures.md": ("two_panels.png", "fig.pdf", "real.jsonl", "model.html"),
    "guides/capture.md": ("moments/step_1000", "layers.jsonl", "layers.html"),
    "guides/ci.md": ("report.json",),
    "guides/notebooks.md": ("m000.npz", "model.html", "last_layer.moments.npz"),
    "tutorial.md": ("layer5.json", "layers.jsonl", "layers.html"),
}

"""The training callbacks log each snapshot's headline metrics through the framework's own loggers: a Lightning run
with its TensorBoardLogger and a Hugging Face Trainer run with report_to=["tensorboard"] write event files that hold
``spectra/<module>/alpha`` (and the rest) at every snapshot's step, read back here with TensorBoard's own reader,
equal to ``spectra fit`` of the snapshot's moment file."""

from __future__ import annotations

import glob
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard")

import spectra_cli as spectra  # noqa: E402
from spectra_cli.errors import OptionError  # noqa: E402

pytestmark = pytest.mark.slow  # (the default run does not even import this module: tests/conftest.py)

FIT = {"window": "3:20"}  # (32 features: the default window would be ranks 1..32, leaving no rank for the spikes)
NAMES = ("alpha", "alpha_se", "participation_ratio", "participation_ratio_se", "entropy_rank", "entropy_rank_se",
         "top_pc_share", "top_pc_share_se", "spikes")


def scalars(logdir: str) -> dict[str, dict[int, float]]:
    """Every scalar of every event file under ``logdir``: ``{tag: {step: value}}`` (TensorBoard's reader; a scalar
    is a simple value, or a tensor of the scalars plugin)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out: dict[str, dict[int, float]] = {}
    for f in sorted(glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"), recursive=True)):
        for event in EventFileLoader(f).Load():
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    out.setdefault(v.tag, {})[event.step] = v.simple_value
                elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name == "scalars":
                    out.setdefault(v.tag, {})[event.step] = float(tensor_util.make_ndarray(v.tensor))
    return out


def expected(folder, step: int) -> dict[str, float]:
    """What the snapshot of ``step`` should log: spectra fit of its moment file, the same keywords."""
    doc = spectra.fit(str(folder / f"step_{step}" / "body.npz"), spikes=True, **FIT).to_dict()
    return {"alpha": doc["fit"]["alpha"], "alpha_se": doc["fit"]["se"],
            "participation_ratio": doc["rank"]["participation_ratio"],
            "participation_ratio_se": doc["rank"]["se"]["participation_ratio"],
            "entropy_rank": doc["rank"]["entropy_rank"], "entropy_rank_se": doc["rank"]["se"]["entropy_rank"],
            "top_pc_share": doc["isotropy"]["top_pc_share"], "top_pc_share_se": doc["isotropy"]["se"]["top_pc_share"],
            "spikes": doc["spectrum"]["spikes"]["count"]}


def _check(logged: dict[str, dict[int, float]], prefix: str, folder, steps: list[int]) -> None:
    for step in steps:
        want = expected(folder, step)
        for name in NAMES:
            tag = f"{prefix}spectra/body/{name}"
            assert tag in logged, (tag, sorted(logged))
            assert logged[tag][step] == pytest.approx(want[name], rel=1e-6), (tag, step)  # (float32 in the file)
    assert {s for tag, v in logged.items() if tag.startswith(f"{prefix}spectra/") for s in v} == set(steps)


def test_a_lightning_run_logs_the_headline_metrics_at_each_snapshot(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import TensorBoardLogger

    from spectra_cli.capturing.callbacks import SpectraLightningCallback
    from tests.capturing.lightning_run import fit_tiny

    logger = TensorBoardLogger(save_dir=str(tmp_path / "tb"), name="run", version=0)
    cb = SpectraLightningCallback(tmp_path / "moments", modules="body", every=2, fit=FIT)
    fit_tiny(pl, cb, tmp_path, d_in=32, d_hidden=32, rows=7 * 24, batch=24, logger=logger)
    assert sorted(cb.logged) == [2, 4, 6, 7]  # every 2 steps, and the end of training
    _check(scalars(logger.log_dir), "", tmp_path / "moments", [2, 4, 6, 7])


def test_a_trainer_run_logs_the_headline_metrics_through_its_integrations(tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    from spectra_cli.capturing.callbacks import SpectraTrainerCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Linear(32, 32)
            self.head = torch.nn.Linear(32, 1)

        def forward(self, x, labels=None):
            y = self.head(torch.tanh(self.body(x))).squeeze(-1)
            return {"loss": (y - labels).pow(2).mean(), "logits": y}

    torch.manual_seed(0)
    rows = [{"x": torch.randn(32), "labels": torch.tensor(0.0)} for _ in range(7 * 24)]
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=7, per_device_train_batch_size=24,
                             report_to=["tensorboard"], logging_steps=3, save_strategy="no", use_cpu=True,
                             disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0,
                             log_level="error")
    trainer = Trainer(model=Net(), args=args, train_dataset=rows)
    cb = SpectraTrainerCallback.add_to(trainer, tmp_path / "moments", modules="body", every=2, fit=FIT)
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert names.index("SpectraTrainerCallback") < names.index("TensorBoardCallback")  # (before it closes its file)
    trainer.train()
    assert sorted(cb.logged) == [2, 4, 6, 7]
    logged = scalars(str(tmp_path / "tb"))
    _check(logged, "train/", tmp_path / "moments", [2, 4, 6, 7])  # (TensorBoard files every Trainer value in train/)
    assert len(glob.glob(str(tmp_path / "tb" / "**" / "events.out.tfevents.*"), recursive=True)) == 1


def test_what_is_logged_is_checked_at_once(tmp_path):
    from spectra_cli.capturing.callbacks import SpectraTrainerCallback

    with pytest.raises(OptionError, match="^log='fit.window' is not a number of a report"):
        SpectraTrainerCallback(tmp_path, modules="body", log=["fit.window"])
    with pytest.raises(OptionError, match="^fit: 'windo' is not a keyword of spectra_cli.fit"):
        SpectraTrainerCallback(tmp_path, modules="body", fit={"windo": "3:20"})
    with pytest.raises(OptionError, match="window"):
        SpectraTrainerCallback(tmp_path, modules="body", fit={"window": "20:3"})
    with pytest.raises(OptionError, match="^log=3 must be True, False or a list of report fields"):
        SpectraTrainerCallback(tmp_path, modules="body", log=3)
    with pytest.raises(OptionError, match="more than 4096 threads"):
        SpectraTrainerCallback(tmp_path, modules="body", fit={"threads": 10**30})
    with pytest.raises(OptionError, match="^fit: 'rows' applies to rows; each snapshot is a moment file"):
        SpectraTrainerCallback(tmp_path, modules="body", fit={"rows": "0:10"})
    with pytest.raises(OptionError, match="^trainer=5 must be the transformers Trainer"):
        SpectraTrainerCallback(tmp_path, modules="body", trainer=5)
    (tmp_path / "file").write_text("x")
    with pytest.raises(spectra.OutputError, match="exists and is not a directory"):  # (now, not at a snapshot)
        SpectraTrainerCallback(tmp_path / "file", modules="body")
    with pytest.raises(OptionError, match="precision"):  # a reading keyword's value, checked at once too
        SpectraTrainerCallback(tmp_path, modules="body", fit={"precision": "float16"})
    with pytest.raises(OptionError, match="^log='density.alpha' needs density=True, and fit gives density=False"):
        SpectraTrainerCallback(tmp_path, modules="body", log=["density.alpha"], fit={"density": False})
    cb = SpectraTrainerCallback(tmp_path, modules="body", log=["rank.participation_ratio"], fit=FIT,
                                trainer=type("Trainer", (), {"log": lambda self, logs: None})())
    assert cb.fields == ("rank.participation_ratio",) and not cb.fit_keywords["options"].spikes
    assert cb.schedule.options["groups"] == 16  # (logging: the errors from row groups)
    unbound = SpectraTrainerCallback(tmp_path, modules="body")  # (no trainer: nothing to log, no groups added)
    assert unbound.schedule.options.get("groups", 0) == 0
    cb = SpectraTrainerCallback(tmp_path, modules="body", log=["fit.alpha", "density.alpha"])
    assert cb.fit_keywords["options"].density  # (the option the field needs, turned on)
    off = SpectraTrainerCallback(tmp_path, modules="body", log=False)
    assert off.fields == () and off.schedule.options.get("groups", 0) == 0
    from spectra_cli import registry
    from spectra_cli.capturing.dashboard import name_of

    assert [name_of(m.path) for m in registry.view("headline")] == ["alpha", "spikes", "participation_ratio",
                                                                   "entropy_rank", "top_pc_share"]
    assert name_of("density.alpha") == "density.alpha"  # (never the headline alpha's name)

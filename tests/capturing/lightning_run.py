"""A tiny Lightning run the callback tests share: ``body`` (a d_in x d_hidden linear layer, the captured module)
then a head, trained a few steps by SGD on Gaussian rows."""

from __future__ import annotations

from typing import Any


def fit_tiny(pl: Any, callback: Any, root: Any, *, d_in: int, d_hidden: int, rows: int, batch: int,
             logger: Any = False) -> None:
    """One epoch of a tiny LightningModule over ``rows`` Gaussian rows in batches of ``batch``, with ``callback``."""
    import torch

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Linear(d_in, d_hidden)
            self.head = torch.nn.Linear(d_hidden, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            (x,) = batch
            return self.head(torch.tanh(self.body(x))).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(rows, d_in)), batch_size=batch)
    trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=logger, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                         default_root_dir=str(root))
    trainer.fit(Net(), data)

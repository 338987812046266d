"""Capturing: moments of a torch model's modules as it runs. Forward hooks and the moments kept on the activations'
device (:mod:`.hooks`, :mod:`.device`), the ``spectra capture`` command over a local Hugging Face folder
(:mod:`.command`), and the training callbacks of the Hugging Face ``Trainer`` and of Lightning (:mod:`.callbacks`)
with what they log to the run's dashboard (:mod:`.dashboard`). Nothing here is imported until used (torch,
transformers and Lightning are optional)."""

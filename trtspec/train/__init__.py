"""``trtspec train-draft``: drafters trained for a target through NVIDIA Model-Optimizer's speculative API.

The target is loaded with ``transformers``, converted with ``modelopt.torch.speculative.convert`` (EAGLE-3:
``("eagle", cfg)``; DFlash / DSpark: ``("dflash", cfg)``), trained on the loss its converted ``forward``
computes, and exported with ``modelopt.torch.export.export_speculative_decoding`` -- then corrected where the
export is wrong for the target (:mod:`trtspec.train.export`) and checked on held-out prompts with the local
runtime (``acceptance.json``). Every setting is derived from the target (:mod:`trtspec.train.derive`) or given
in :class:`trtspec.train.config.TrainDraftConfig`. Nothing here imports ``trtspec.bench``: measurement depends
on training, not the reverse.

Modules: ``config`` (the typed settings), ``derive`` (layer ids, sizes, mask token, draft vocabulary),
``data`` (text sources, self-distillation, held-out prompts), ``compat`` (Model-Optimizer 0.47 quirks),
``modelopt_model`` (convert), ``loop`` (optimizer and progress), ``export``, ``acceptance``, ``run``.
"""

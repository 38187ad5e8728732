"""The whole pipeline in one command: ``python -m minillm`` (also the ``minillm`` console script).

tokenizer → pretraining → supervised fine-tuning → preference optimisation (DPO, or PPO) → evaluation →
report. Each phase writes its outputs and a ``done.json`` under one run folder and is skipped when rerun;
pretraining resumes from its last checkpoint after an interruption.
"""

from minillm.pipeline.presets import PRESETS, PipelinePreset

__all__ = ["PRESETS", "PipelinePreset"]

"""LoRA runs' folders: a PEFT adapter is loaded with its base, or merged into an ordinary checkpoint.

An adapter folder holds ``adapter_config.json`` and adapter weights; its base must be reachable before
anything loads (:func:`base_problem`). Transformers backends merge it in memory (:func:`load_adapter_model`);
vLLM loads whole models only: merge it when training ends (``merge_adapter: true``) or afterwards
(:func:`merge_adapter_folder`).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from routing_grpo.io.paths import hub_offline, looks_local, resolve_model_path

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MERGE_HINT = (
    "merge it into a full model first (merge_adapter: true when training, or "
    'routing_grpo.io.adapters.merge_adapter_folder; docs/inference.md, "LoRA runs")'
)


def is_adapter_folder(model: str | Path) -> bool:
    """Whether ``model`` is a local folder holding a PEFT adapter (its config and weights), not a whole model."""
    folder = Path(model).expanduser()
    if not str(model) or not (folder / ADAPTER_CONFIG).is_file():
        return False
    return any((folder / n).is_file() for n in ADAPTER_WEIGHTS)


def adapter_config(folder: str | Path) -> dict[str, Any]:
    """The adapter's config (a ValueError naming the file when it is not a JSON object)."""
    path = Path(folder).expanduser() / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise ValueError(f"{path}: not a PEFT adapter config ({type(err).__name__})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a PEFT adapter config (not a JSON object)")
    return config


def adapter_base(folder: str | Path) -> str:
    """An adapter folder's ``base_model_name_or_path``, an ``offline:`` name resolved (a ValueError naming the
    file when it has none)."""
    base = adapter_config(folder).get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        path = Path(folder).expanduser() / ADAPTER_CONFIG
        raise ValueError(f"{path}: names no base model (base_model_name_or_path)")
    return resolve_model_path(base)


def base_revision(folder: str | Path) -> str | None:
    """The base's revision the adapter was trained on (None: the default branch, or a local folder)."""
    revision = adapter_config(folder).get("revision")
    return revision if isinstance(revision, str) and revision else None


def base_problem(folder: str | Path) -> str | None:
    """Why the base of the adapter in ``folder`` cannot be loaded from here, in one line naming both (None when
    it can be tried); a Hub id is checked only while the Hub is offline."""
    try:
        base = adapter_base(folder)
    except ValueError as err:
        return str(err)
    lead = f"{folder} is a LoRA adapter of the base model {base}"
    fix = f"put the base there, or set base_model_name_or_path in {Path(folder) / ADAPTER_CONFIG} to where it is"
    path = Path(base).expanduser()
    if path.is_dir():
        if is_adapter_folder(path):
            return f"{lead}, which is itself an adapter folder: merge that one into a full model first"
        return None
    if path.exists():
        return f"{lead}, which is a file, not a model folder; {fix}"
    if looks_local(base):
        return f"{lead}, which is not here (no such folder); {fix}"
    if not hub_offline():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:  # what an offline load needs first: the base's config.json in the Hub cache
        cached = try_to_load_from_cache(base, "config.json", revision=base_revision(folder))
    except Exception:  # noqa: BLE001 - a name the Hub would refuse: not cached
        cached = None
    if isinstance(cached, str):
        return None
    return (
        f"{lead}, which is neither a local folder nor in the Hub cache, and the Hub is offline here "
        f"(HF_HUB_OFFLINE is set); download it while online, or set base_model_name_or_path in "
        f"{Path(folder) / ADAPTER_CONFIG} to a local copy"
    )


def vllm_problem(folder: str | Path, name: str = "backend") -> str:
    """The one line refusing vLLM for an adapter folder (``name``: the option that asked for vLLM)."""
    try:
        base = f" of {adapter_base(folder)}"
    except ValueError:
        base = ""
    return f"{name}: vllm loads whole models, and {folder} is a LoRA adapter{base}: use transformers, or {MERGE_HINT}"


def load_adapter_model(folder: str | Path, *, dtype: str = "auto") -> Any:
    """The base (at the adapter's revision) with the adapter of ``folder`` merged in by PEFT."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(
        adapter_base(folder), revision=base_revision(folder), dtype=dtype
    )
    return PeftModel.from_pretrained(base, str(Path(folder).expanduser())).merge_and_unload()


def merge_adapter_folder(folder: str | Path, output: str | Path, *, dtype: str = "auto") -> Path:
    """Saves the adapter of ``folder`` merged into its base in ``output`` (model, tokenizer and
    ``routing_config.json``): an ordinary checkpoint, which vLLM loads too. Raises ValueError (one line)."""
    from transformers import AutoTokenizer

    source, target = Path(folder).expanduser(), Path(output).expanduser()
    if not is_adapter_folder(source):
        raise ValueError(f"{folder}: not a LoRA adapter folder ({ADAPTER_CONFIG} and {ADAPTER_WEIGHTS[0]})")
    problem = base_problem(source)
    if problem:
        raise ValueError(problem)
    if target.resolve() == source.resolve():
        raise ValueError(f"{output}: the adapter's own folder; merge into another folder")
    model = load_adapter_model(source, dtype=dtype)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)
    if (source / "routing_config.json").is_file():  # the run's routing settings go with the model
        shutil.copyfile(source / "routing_config.json", target / "routing_config.json")
    return target


def save_final_model(trainer: Any, output_dir: str, merge: bool) -> None:
    """The trainer's final save into ``output_dir``: with ``merge`` and a PEFT model, the adapter merged into
    its base (no adapter files left); else what ``trainer.save_model`` saves (also under DeepSpeed or FSDP,
    whose sharded weights cannot be merged, with a warning)."""
    from peft import PeftModel

    model = trainer.accelerator.unwrap_model(trainer.model)
    merged = merge and isinstance(model, PeftModel)
    if merged and (
        getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False)
    ):
        logger.warning(
            "merge_adapter: not under DeepSpeed or FSDP (sharded weights); the adapter is saved: merge it "
            "afterwards with routing_grpo.io.adapters.merge_adapter_folder"
        )
        trainer.args.merge_adapter = merged = False  # the model card says what the folder holds
    if merged:
        trainer.model = model.merge_and_unload()
    trainer.save_model(output_dir)
    if merged and trainer.accelerator.is_main_process:
        for name in (ADAPTER_CONFIG, *ADAPTER_WEIGHTS):
            (Path(output_dir) / name).unlink(missing_ok=True)
        logger.info("Saved the LoRA adapter merged into its base in %s (merge_adapter)", output_dir)

"""Every private name of TRL (and of transformers' ``Trainer``) the package uses, in one table, with its reason.

The trainer runs on TRL 1.16's public hooks where they exist; what none carries is listed here (hence the pin
``trl>=1.16,<1.17``). :func:`check_trainer` checks the table when the trainer is built, so a moved name fails
then, by name; tests/test_training_trl_private.py checks it against TRL and the package's source.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

OVERRIDDEN, CALLED, ATTRIBUTE, CLASS_ATTRIBUTE = "overridden", "called", "attribute", "class attribute"
# The modules of the routing trainer's own class and its engine calls: what check_trainer checks.
TRAINER_MODULES = ("training.trainer", "training.bucketed_logprobs", "training.trl_vllm")


@dataclass(frozen=True)
class PrivateName:
    """One private name of TRL's or transformers' that the package uses."""

    owner: str  # GRPOTrainer, VLLMGeneration or Trainer
    name: str
    use: str  # OVERRIDDEN, CALLED, ATTRIBUTE or CLASS_ATTRIBUTE
    where: str  # the package's module(s) that use it
    signature: str | None = None  # for methods, the owner's signature in the installed TRL / transformers
    reason: str = ""  # why no public hook does it
    needs: str | None = None  # for attributes TRL sets only on some runs: use_vllm or vllm_colocate


TRL_PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # Overridden. TRL has no advantage hook; its maintainers call overriding this method the supported way.
    PrivateName(
        "GRPOTrainer", "_generate_and_score_completions", OVERRIDDEN, "training.trainer",
        "(self, inputs: list[dict[str, torch.Tensor | typing.Any]]) -> dict[str, torch.Tensor | typing.Any]",
        "the routing advantages (centring and the balance term) replace TRL's: no public hook computes them",
    ),
    PrivateName(
        "GRPOTrainer", "_calculate_rewards", OVERRIDDEN, "training.trainer",
        "(self, inputs, prompts, completions, completion_ids_list)",
        "the advantages need every reward function's gathered rewards, which TRL returns only here",
    ),
    PrivateName(
        "GRPOTrainer", "_get_per_token_logps_and_entropies", OVERRIDDEN, "training.bucketed_logprobs",
        "(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, "
        "compute_aux_loss=False, pixel_values=None, image_grid_thw=None, num_images=None, "
        "pixel_attention_mask=None, spatial_shapes=None, num_tiles=None, image_sizes=None, token_type_ids=None, "
        "mm_token_type_ids=None, image_position_ids=None) "
        "-> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]",
        "the loss forwards on length buckets: TRL pads every row to the micro-batch's longest",
    ),
    PrivateName(
        "Trainer", "_issue_warnings_after_load", OVERRIDDEN, "training.trainer", "(self, load_result: Any) -> None",
        "a checkpoint leaves tied weights out; transformers warns of them unless _keys_to_ignore_on_save names them",
    ),
    PrivateName(
        "GRPOTrainer", "_generate_single_turn", CALLED, "training.trainer",
        "(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False)",
        "where nothing is capped in generation, the rollout takes TRL's own generation, as a plain GRPO run",
    ),
    PrivateName("GRPOTrainer", "_logs", ATTRIBUTE, "training.trainer",
                reason="the completions table shows the routing advantages, not TRL's"),
    PrivateName("GRPOTrainer", "_step", ATTRIBUTE, "training.trainer",
                reason="the micro-step inside an optimizer step: the generation batch s every schedule counts"),
    PrivateName("GRPOTrainer", "_dist", ATTRIBUTE, "training.trainer",
                reason="the policy's full parameters for generation under FSDP, as TRL's own generation"),
    PrivateName("GRPOTrainer", "_last_loaded_step", ATTRIBUTE, "training.trl_vllm", needs="use_vllm",
                reason="weight sync before the engine generates; TRL's rollout_func path does not re-sync "
                "weights a sleeping colocated engine dropped"),
    PrivateName("VLLMGeneration", "_llm_weights_sleeping", ATTRIBUTE, "training.trl_vllm", needs="vllm_colocate",
                reason="level-2 sleep drops the weights: the next generation must sync them again"),
    # Class attributes: the model card's trainer name, paper and tags (TRL has no public setting for them).
    PrivateName("GRPOTrainer", "_tag_names", CLASS_ATTRIBUTE, "training.trainer", reason="the card's tags"),
    PrivateName("GRPOTrainer", "_name", CLASS_ATTRIBUTE, "training.trainer", reason="the card's trainer name"),
    PrivateName("GRPOTrainer", "_paper", CLASS_ATTRIBUTE, "training.trainer", reason="the card's citation"),
)  # fmt: skip


def owner_class(owner: str) -> type:
    """The class a :class:`PrivateName` names, from the installed TRL / transformers."""
    module = {
        "GRPOTrainer": "trl",
        "VLLMGeneration": "trl.generation.vllm_generation",
        "Trainer": "transformers",
    }
    return getattr(importlib.import_module(module[owner]), owner)


def _applies(entry: PrivateName, trainer: Any) -> bool:
    if entry.needs == "use_vllm":
        return bool(getattr(trainer, "use_vllm", False))
    if entry.needs == "vllm_colocate":
        engine = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
        return engine is not None and getattr(engine, "mode", None) == "colocate"
    return True


def problems(trainer: Any) -> list[str]:
    """What of :data:`TRL_PRIVATE_NAMES` does not hold on a built trainer (empty when all does)."""
    found = []
    for entry in TRL_PRIVATE_NAMES:
        if entry.where not in TRAINER_MODULES or not _applies(entry, trainer):
            continue
        owner = owner_class(entry.owner)
        label = f"{entry.owner}.{entry.name}"
        if entry.use in (OVERRIDDEN, CALLED):
            if not callable(getattr(owner, entry.name, None)):
                found.append(f"{label} ({entry.use} by routing_grpo.{entry.where}) is gone")
        elif entry.use == CLASS_ATTRIBUTE:
            if not hasattr(owner, entry.name):
                found.append(f"{label} (set by routing_grpo.{entry.where}) is gone")
        else:
            holder = trainer.vllm_generation if entry.owner == "VLLMGeneration" else trainer
            if not hasattr(holder, entry.name):
                found.append(f"{label} (used by routing_grpo.{entry.where}) is not set")
    return found


def check_trainer(trainer: Any) -> None:
    """Raises RuntimeError naming every private TRL name the built trainer relies on that has moved."""
    found = problems(trainer)
    if found:
        import trl

        raise RuntimeError(
            f"RoutingGRPOTrainer relies on private names of TRL 1.16 that this TRL ({trl.__version__}) has "
            f"moved: {'; '.join(found)}. Install the TRL the package pins (trl>=1.16,<1.17)."
        )

"""Training entry point: ``python -m routing_grpo.train --config RECIPE.yaml [--key value ...]``, also
``routing-grpo train``.

Parsed with ``TrlParser`` as in open-r1 (script arguments + :class:`RoutingGRPOConfig` + TRL's
``ModelConfig``, :mod:`routing_grpo.training.arguments`), so every recipe key can be overridden on the command line,
and it runs under ``accelerate launch``. :func:`main` goes through the stages of a run: check the recipe and
this machine, load the data, check the run folder, load the tokenizer and model, claim the folder, train,
then save, write the model card and push when ``push_to_hub`` is set.

Bad input stops the run with one line naming the key (exit code 2, :mod:`routing_grpo.io.errors`), before
the (possibly large) model loads wherever the problem is knowable without it. ``model_name_or_path:
offline:smollm2`` (or ``offline:tiny``, ``offline:mini``) uses a model that needs no network.
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from routing_grpo import filter_known_warnings, version_text
from routing_grpo.io.errors import UsageError, run_entry, user_errors

if TYPE_CHECKING:  # the run's modules import torch, transformers and TRL: only when a run starts
    from trl import ModelConfig

    from routing_grpo.training.arguments import RoutingScriptArguments
    from routing_grpo.training.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)

INTERRUPTED = "interrupted before training started; nothing was saved"


def make_parser(subparsers: argparse._SubParsersAction | None = None) -> argparse.ArgumentParser:
    """The training options' parser (TRL's, with one-line errors); given ``routing-grpo``'s ``subparsers``,
    the ``train`` command there, whose words go to :func:`command` as TRL's CLI hands its scripts theirs."""
    if subparsers is None:
        from routing_grpo.training.recipe import train_parser

        return train_parser()
    parser = subparsers.add_parser(
        "train",
        help="train the router or a baseline: routing-grpo train --config RECIPE.yaml ... "
        "(`routing-grpo train --help`: its options)",
        add_help=False,  # `train --help` is the recipe keys' help (train_help)
    )
    parser.set_defaults(entry=command)
    return parser


def parse_args(
    argv: list[str] | None = None,
) -> tuple[RoutingScriptArguments, RoutingGRPOConfig, ModelConfig]:
    """Checks the recipe (and command line), then parses both into the three argument dataclasses."""
    from routing_grpo.training.hub import hub_repo_name
    from routing_grpo.training.recipe import (
        check_command_line,
        command_line_values,
        parse_error_line,
        set_modes_text,
        take_option,
    )
    from routing_grpo.training.runs import run_output_dir

    argv = list(sys.argv[1:] if argv is None else argv)
    path, recipe = check_command_line(argv)
    cli_values = command_line_values(argv)
    # --modes takes a list of mappings (JSON or YAML), which argparse cannot type: it is set after parsing.
    argv, modes_text = take_option(argv, "--modes")
    try:
        script_args, training_args, model_args = make_parser().parse_args_and_config(argv)
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(parse_error_line(err, path, cli_values)) from None
    if modes_text is not None:
        set_modes_text(training_args, modes_text)
    if path is not None:
        # One run, one folder and one Hub repo: the recipe and seed name them unless the recipe or command
        # line does.
        script_args.recipe_path = str(path)
        if training_args.hub_model_id is None:
            training_args.hub_model_id = hub_repo_name(path, training_args.seed, script_args.hub_org)
        if "output_dir" not in recipe and "output_dir" not in cli_values:
            training_args.output_dir = run_output_dir(path, training_args.seed)
    return script_args, training_args, model_args


def main(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    model_args: ModelConfig,
    callbacks: list[Any] | None = None,
    progress_bar: bool = True,
) -> Any:
    """Trains, saves, writes the model card and pushes when asked; returns the trainer (None when this run
    had finished already in its folder and nothing was trained).

    ``callbacks`` (``transformers.TrainerCallback``) are handed to the trainer (the demo's progress lines);
    ``progress_bar=False`` drops the trainer's line (or bar) per generation batch. One process trains into
    a folder at a time: the run folder is locked once the settings are checked, before anything is loaded.
    """
    from routing_grpo.training.launch_checks import before_loading
    from routing_grpo.training.recipe import preflight
    from routing_grpo.training.runs import run_folder_lock

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    # Bad names, paths, files, columns or trackers fail here in one line before the model loads (launch: a warning).
    level_mix = preflight(script_args, training_args, model_args)
    before_loading(script_args, training_args)
    with run_folder_lock(training_args):
        return train_in_folder(script_args, training_args, model_args, level_mix, callbacks, progress_bar)


def train_in_folder(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    model_args: ModelConfig,
    level_mix: dict[int, float] | None,
    callbacks: list[Any] | None = None,
    progress_bar: bool = True,
) -> Any:
    """:func:`main`'s stages once the settings are checked and the run folder is locked."""
    from transformers import set_seed
    from trl import get_peft_config

    from routing_grpo.core.prompting import forced_word_ids
    from routing_grpo.data.datasets import check_columns
    from routing_grpo.io import adapters
    from routing_grpo.training import loading, runs
    from routing_grpo.training.hub import (
        check_hub_card,
        hub_dataset_name,
        install_model_card,
        push_saved_model,
    )
    from routing_grpo.training.preemption import exit_if_preempted
    from routing_grpo.training.trainer import RoutingGRPOTrainer

    ###############################################################
    # Load data
    ###############################################################
    set_seed(training_args.seed)
    loading.configure_tracking(training_args)
    train_dataset, eval_dataset = loading.load_datasets(script_args, training_args, level_mix)
    with user_errors("", ValueError):
        check_columns(train_dataset, "train", training_args.answer_column)
        check_columns(eval_dataset, "validation", training_args.answer_column)

    ###############################################################
    # One run, one folder
    ###############################################################
    # Another recipe's or seed's folder or checkpoint is never used, and a finished run is not trained again.
    identity = runs.run_identity(script_args, training_args)
    runs.check_output_folder(training_args.output_dir, script_args.overwrite_output_dir)
    checkpoint = runs.resume_checkpoint(training_args) or None
    runs.check_resume(checkpoint, identity)
    if runs.check_run_folder(training_args.output_dir, identity, training_args.max_steps):
        if training_args.process_index == 0:
            print(runs.finished_note(training_args.output_dir, identity), flush=True)
        return None

    ###############################################################
    # Load the tokenizer and the model
    ###############################################################
    model_path = loading.resolve_model(script_args, model_args, training_args)
    tokenizer = loading.tokenizer_for_training(model_path, script_args, model_args, training_args)
    with user_errors("modes", ValueError):
        forced_word_ids(training_args.mode_specs, tokenizer, training_args.effective_routing_question)
    model = loading.model_for_training(model_path, model_args, training_args)

    ###############################################################
    # Initialize the trainer
    ###############################################################
    # A setting only the model can check (LoRA target modules, a tracker that is not installed): one line too.
    with (
        user_errors("", ValueError, ImportError, RuntimeError),
        user_errors("LoRA settings (use_peft, lora_*)", loading.peft_error_type()),
    ):
        trainer = RoutingGRPOTrainer(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
            callbacks=[*(callbacks or []), runs.run_identity_callback(identity)],
        )
    # Never over another run's model card: checked before training (every_save pushes during it) and again
    # before the final push.
    check_hub_card(trainer, training_args, script_args)
    trainer.show_batches = progress_bar
    # Every card TRL writes (here, and in push_to_hub / save_model with push_to_hub) gets the settings section.
    install_model_card(trainer, training_args, script_args, model_args, hub_dataset_name(script_args))

    ###############################################################
    # Training loop
    ###############################################################
    # The folder is claimed only now that the run has started: a run that failed to load claims nothing.
    if training_args.process_index == 0:
        runs.write_run_identity(training_args.output_dir, identity)
        runs.set_aside_incomplete_checkpoints(training_args.output_dir, checkpoint)
    if checkpoint and training_args.resume_from_checkpoint is None:
        logger.info("Resuming from %s, the latest complete checkpoint", checkpoint)
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        trainer.close_batch_bar()
    # Preempted (SIGTERM / SIGINT / a recipe's preemption_signals): the checkpoint is written and the run is
    # not finished, so no final model, model card or push; every process exits with 128 + signal.
    exit_if_preempted(trainer)

    ###############################################################
    # Save the model, the routing settings and the model card; push
    ###############################################################
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    adapters.save_final_model(trainer, training_args.output_dir, training_args.merge_adapter)
    if trainer.accelerator.is_main_process:
        runs.finish_run_folder(trainer, training_args, identity)
    if training_args.push_to_hub:
        check_hub_card(trainer, training_args, script_args)
        # The token comes from HF_TOKEN or `hf auth login`, never from a recipe; a failed push names the folder.
        push_saved_model(trainer, training_args)
    # As TRL's own GRPO script: finish the trackers and destroy the process group (transformers >= 5.18 has
    # Trainer.end; before it, the trackers finish with the process).
    end = getattr(trainer, "end", None)
    if end is not None:
        end()
    return trainer


def train_command(argv: list[str], prog: str = "routing-grpo train") -> int:
    """The command's words: help or version, else check, parse and train."""
    from routing_grpo.training.help import full_help, recipe_for_help, short_help

    if "--help-all" in argv:
        print(full_help(prog), end="")
    elif "-h" in argv or "--help" in argv:
        print(short_help(prog, recipe_for_help(argv)), end="")
    elif "--version" in argv:
        print(version_text())
    else:
        main(*parse_args(argv))
    return 0


def command(argv: list[str], prog: str = "routing-grpo train") -> int:
    """``routing-grpo train ARGS``: the exit code; bad input is one line and 2 (traceback with the debug env)."""
    return run_entry("routing-grpo train", partial(train_command, prog=prog), argv, interrupted=INTERRUPTED)


def cli(argv: list[str] | None = None, prog: str = "python -m routing_grpo.train") -> None:
    filter_known_warnings()
    sys.exit(command(list(sys.argv[1:] if argv is None else argv), prog))


if __name__ == "__main__":
    cli()

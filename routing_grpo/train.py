"""Training entry point: ``python -m routing_grpo.train --config RECIPE.yaml [--KEY VALUE ...]``, also
``routing-grpo train`` and ``accelerate launch ... -m routing_grpo.train``.

In open-r1's shape: :func:`parse_args` reads the recipe and command line into the three argument classes;
:func:`main` checks, loads, trains, saves and pushes. Bad input is one line naming the key (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routing_grpo import filter_known_warnings, version_text
from routing_grpo.io.errors import UsageError, run_entry, user_errors
from routing_grpo.io.recipe_file import RecipeFileError, read_recipe_file
from routing_grpo.training.help import check_options, full_help, short_help

if TYPE_CHECKING:  # the run's modules import torch, transformers and TRL: only when a run starts
    from trl import ModelConfig

    from routing_grpo.training.arguments import RoutingScriptArguments
    from routing_grpo.training.config import RoutingGRPOConfig


def make_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``train`` command of ``routing-grpo``, whose words go to :func:`command` as TRL's CLI hands its
    scripts theirs."""
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
    argv = list(sys.argv[1:] if argv is None else argv)
    check_options(argv)  # a mistyped option, before torch and TRL load
    from routing_grpo.training import recipe
    from routing_grpo.training.arguments import train_parser
    from routing_grpo.training.hub import hub_repo_name
    from routing_grpo.training.runs import run_output_dir

    path, recipe_keys = recipe.check_command_line(argv)
    cli_values = recipe.command_line_values(argv)
    # --modes takes a list of mappings (JSON or YAML), which argparse cannot type: it is set after parsing.
    argv, modes_text = recipe.take_option(argv, "--modes")
    try:
        script_args, training_args, model_args = train_parser().parse_args_and_config(argv)
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(recipe.parse_error_line(err, path, cli_values)) from None
    if modes_text is not None:
        recipe.set_modes_text(training_args, modes_text)
    if path is not None:
        # One run, one folder and one Hub repo: the recipe and seed name them unless told otherwise.
        script_args.recipe_path = str(path)
        if training_args.hub_model_id is None:
            training_args.hub_model_id = hub_repo_name(path, training_args.seed, script_args.hub_org)
        if "output_dir" not in recipe_keys and "output_dir" not in cli_values:
            training_args.output_dir = run_output_dir(path, training_args.seed)
    return script_args, training_args, model_args


def main(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    model_args: ModelConfig,
    callbacks: list[Any] | None = None,
    progress_bar: bool = True,
) -> Any:
    """Checks, loads, trains, saves, writes the model card and pushes when asked.

    Args:
        callbacks: ``transformers.TrainerCallback`` objects for the trainer (the demo's progress lines).
        progress_bar: False drops the trainer's line (or bar) per generation batch.

    Returns:
        The trainer, or None when this run had finished already in its folder and nothing was trained.
    """
    from safetensors import SafetensorError
    from transformers import set_seed
    from trl import get_peft_config

    from routing_grpo.io.adapters import ADAPTER_CONFIG, save_final_model
    from routing_grpo.io.jsonl import write_json
    from routing_grpo.training import hub, loading, runs
    from routing_grpo.training.preemption import exit_if_preempted
    from routing_grpo.training.recipe import preflight
    from routing_grpo.training.trainer import RoutingGRPOTrainer

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)

    # Check what the settings, the launch and this machine can tell before anything loads
    level_mix = preflight(script_args, training_args, model_args)

    # One run, one folder: locked for this process; another run's folder or checkpoint is refused
    with runs.run_folder(script_args, training_args) as run:
        if run is None:  # this run has finished in its folder already: nothing to train
            return None
        identity, checkpoint, at_end = run

        # Load the data
        set_seed(training_args.seed)
        train_dataset, eval_dataset = loading.load_datasets(script_args, training_args, level_mix)

        # Load the tokenizer and the model
        model_path = loading.resolve_model(script_args, model_args, training_args)
        tokenizer = loading.load_tokenizer(model_path, script_args, model_args, training_args)
        loading.check_prompt_lengths(model_path, train_dataset, tokenizer, model_args, training_args)
        model = loading.load_model(model_path, model_args, training_args)

        # Initialize the trainer (a setting only the model can check, such as LoRA target modules: one line)
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
        trainer.show_batches = progress_bar
        hub.install_model_card(trainer, training_args, script_args, model_args)

        # Training loop (the folder is claimed only now: a run that failed to load claims nothing)
        runs.claim_run_folder(training_args, identity, checkpoint)
        if at_end:  # the checkpoint is at max_steps: its model is the final one
            runs.load_checkpoint(trainer, checkpoint)
        else:
            try:
                result = trainer.train(resume_from_checkpoint=checkpoint)
            except (OSError, RuntimeError, SafetensorError) as err:  # a checkpoint cut short: one line
                runs.check_checkpoint_written(trainer, err)
                raise
            finally:
                trainer.close_batch_bar()
            # Preempted: the checkpoint is written, the run is not finished; every process exits 128 + signal.
            exit_if_preempted(trainer)
            # total_flos is 0: transformers counts the tokens of input_ids, which GRPO's batches lack.
            result.metrics.pop("total_flos", None)
            trainer.log_metrics("train", result.metrics)
            trainer.save_metrics("train", result.metrics)

        # Save the model, the routing settings and the model card
        trainer.save_state()
        save_final_model(trainer, training_args.output_dir, training_args.merge_adapter)
        if trainer.accelerator.is_main_process:
            adapter = Path(training_args.output_dir) / ADAPTER_CONFIG
            if adapter.is_file():  # the base as given, not where it was built
                base = {"base_model_name_or_path": model_args.model_name_or_path}
                write_json(adapter, {**json.loads(adapter.read_text()), **base})
            runs.finish_run_folder(trainer, training_args, identity)

        # Push to the Hub
        if training_args.push_to_hub:
            hub.push_saved_model(trainer, training_args, script_args)
        # As TRL's GRPO script: finish the trackers and destroy the process group (transformers >= 5.18).
        end = getattr(trainer, "end", None)
        if end is not None:
            end()
        return trainer


def train_command(argv: list[str], prog: str = "routing-grpo train") -> int:
    """The command's words: help or version, else check, parse and train."""
    if "--help-all" in argv:
        print(full_help(prog), end="")
    elif "-h" in argv or "--help" in argv:
        # `--config R --help`: the recipe's values in place of the defaults (a bad recipe is its one line).
        with user_errors("", RecipeFileError):
            recipe = read_recipe_file(argv[argv.index("--config") + 1]) if "--config" in argv[:-1] else None
        print(short_help(prog, recipe), end="")
    elif "--version" in argv:
        print(version_text())
    else:
        main(*parse_args(argv))
    return 0


def command(argv: list[str], prog: str = "routing-grpo train") -> int:
    """``routing-grpo train ARGS``: the exit code; bad input is one line and 2 (traceback with the debug env)."""
    interrupted = "interrupted before training started; nothing was saved"
    return run_entry("routing-grpo train", partial(train_command, prog=prog), argv, interrupted=interrupted)


def cli(argv: list[str] | None = None, prog: str = "python -m routing_grpo.train") -> None:
    filter_known_warnings()
    sys.exit(command(list(sys.argv[1:] if argv is None else argv), prog))


if __name__ == "__main__":
    cli()

"""``routing_config.json``: how a checkpoint routes (its modes and the prompt it was trained with), saved beside
the model and read by evaluation and inference, so that the model is asked as it was trained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, mode_index, parse_modes, routing_instruction
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, prompt_text_problem
from routing_grpo.io.jsonl import read_json_file, write_json
from routing_grpo.io.paths import looks_local, resolve_model_path
from routing_grpo.io.recipe_file import located, read_recipe_file

SETTINGS_FILE = "routing_config.json"
SETTINGS_VERSION = 1


class SettingsNotFoundError(FileNotFoundError):
    """The model has no routing settings file (and none was given)."""


@dataclass(frozen=True)
class RoutingSettings:
    """How a checkpoint routes, as ``routing_config.json`` holds it (with a ``version``)."""

    modes: tuple[ModeSpec, ...]
    routing_instruction: str  # appended to the user turn ("" = none)
    routing_question: str = DEFAULT_ROUTING_QUESTION  # the text after the chat template's generation prompt
    max_completion_length: int = 512  # the training run's limit (the default max_new_tokens)
    single_mode: str | None = None  # the mode of a single-mode baseline

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", parse_modes(self.modes))
        for name in ("routing_question", "routing_instruction"):
            problem = prompt_text_problem(name, getattr(self, name))
            if problem:
                raise ValueError(problem)
        if type(self.max_completion_length) is not int or self.max_completion_length < 1:
            raise ValueError(
                f"max_completion_length must be a positive integer, got {self.max_completion_length!r}"
            )
        if self.single_mode is not None:
            mode_index(self.modes, self.single_mode)

    @property
    def single_mode_index(self) -> int | None:
        return None if self.single_mode is None else mode_index(self.modes, self.single_mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SETTINGS_VERSION,
            "modes": [m.to_dict() for m in self.modes],
            "routing_instruction": self.routing_instruction,
            "routing_question": self.routing_question,
            "max_completion_length": self.max_completion_length,
            "single_mode": self.single_mode,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = SETTINGS_FILE) -> RoutingSettings:
        """Reads the file's contents; unknown keys are ignored (newer writers may add some)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        version = data.get("version", SETTINGS_VERSION)
        if not isinstance(version, int) or version > SETTINGS_VERSION:
            raise ValueError(
                f"{source}: version {version!r} is newer than this code reads ({SETTINGS_VERSION})"
            )
        missing = [k for k in ("modes", "routing_instruction") if k not in data]
        if missing:
            raise ValueError(f"{source}: missing key(s) {missing}")
        try:
            return cls(
                modes=data["modes"],
                routing_instruction=data["routing_instruction"],
                routing_question=data.get("routing_question", DEFAULT_ROUTING_QUESTION),
                max_completion_length=data.get("max_completion_length", 512),
                single_mode=data.get("single_mode"),
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{source}: {err}") from None

    @classmethod
    def from_training_args(cls, args: Any) -> RoutingSettings:
        """The effective settings of a :class:`routing_grpo.training.config.RoutingGRPOConfig`."""
        return cls(
            modes=tuple(args.mode_specs),
            routing_instruction=args.effective_routing_instruction,
            routing_question=args.effective_routing_question,
            max_completion_length=int(args.max_completion_length),
            single_mode=args.single_mode,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> RoutingSettings:
        """A settings file (``.json``) or the settings a training recipe (``.yaml`` / ``.yml``) would save."""
        path = Path(path)
        if path.suffix.lower() == ".json":
            if not path.exists():
                raise FileNotFoundError(f"config not found: {path}")
            data = read_json_file(path)  # path:line for bad JSON, a key written twice, a folder (EISDIR)
            return cls.from_dict(data, source=str(path))
        recipe = read_recipe_file(path)
        try:
            modes = parse_modes(recipe["modes"]) if recipe.get("modes") is not None else DEFAULT_MODES
            single = recipe.get("single_mode")
            instruction = recipe.get("routing_instruction")
            if single is not None:
                instruction, question = "", ""
            else:
                instruction = routing_instruction(modes) if instruction is None else str(instruction)
                question = str(recipe.get("routing_question", DEFAULT_ROUTING_QUESTION) or "")
            limit = recipe.get("max_completion_length")
            return cls(
                modes=modes,
                routing_instruction=instruction,
                routing_question=question,
                max_completion_length=512 if limit is None else int(limit),  # GRPOConfig's default
                single_mode=single,
            )
        except (TypeError, ValueError) as err:
            raise ValueError(located(path, str(err))) from None

    @classmethod
    def load(cls, model: str | Path, revision: str | None = None) -> RoutingSettings:
        """The settings saved with a checkpoint, in its folder or Hub repository (or SettingsNotFoundError)."""
        model = str(model)
        folder = Path(model).expanduser()
        if folder.is_dir():
            path = folder / SETTINGS_FILE
            if not path.is_file():
                raise SettingsNotFoundError(
                    f"{model}: no {SETTINGS_FILE} in this folder (routing-grpo train writes one); "
                    "pass the training recipe with --config"
                )
            return cls.from_file(path)
        if looks_local(model):
            raise SettingsNotFoundError(f"{model}: model folder not found")
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(repo_id=model, filename=SETTINGS_FILE, revision=revision)
        except Exception as err:  # missing repo or file, offline, not a repo id: all mean "no settings here"
            raise SettingsNotFoundError(
                f"{model}: not a folder, and no {SETTINGS_FILE} could be read from the Hub "
                f"({type(err).__name__}); pass the training recipe with --config"
            ) from None
        return cls.from_file(path)

    @classmethod
    def resolve(
        cls, model: str | Path, config: str | Path | None = None, revision: str | None = None
    ) -> RoutingSettings:
        """``config`` (a settings file or a recipe) when given, else the settings saved with ``model``."""
        if config is not None:
            return cls.from_file(config)
        return cls.load(resolve_model_path(str(model)), revision=revision)

    def save(self, folder: str | Path) -> Path:
        """Writes ``FOLDER/routing_config.json`` (atomically) and returns its path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / SETTINGS_FILE
        write_json(path, self.to_dict())
        return path

"""What TRL's engines cannot do with the routing rollouts (routing_grpo.training.trl_vllm), refused before the run."""

from types import SimpleNamespace

from routing_grpo.core.modes import DEFAULT_MODES
from routing_grpo.training.trl_vllm import rollout_settings_problems


def settings(**overrides):
    base = dict(
        generation_kwargs=None, use_vllm=True, use_transformers_continuous_batching=False,
        enforce_caps_in_generation=True, mode_specs=DEFAULT_MODES, vllm_structured_outputs_regex=None,
        temperature=1.0, eval_temperature=0.6, vllm_mode="colocate", vllm_tensor_parallel_size=1,
    )  # fmt: skip
    return SimpleNamespace(**{**base, **overrides})


def test_the_paper_settings_pass():
    assert rollout_settings_problems(settings()) == []
    assert rollout_settings_problems(settings(use_vllm=False, temperature=3.0)) == []


def test_the_rollouts_own_n_and_the_token_limit():
    problems = rollout_settings_problems(settings(generation_kwargs={"n": 2, "max_tokens": 10}))
    assert problems == [
        "generation_kwargs: n is set by the routing rollouts per request; remove it",
        "generation_kwargs: max_tokens is set by the routing rollouts per request; remove it",
    ]


def test_per_call_settings_are_refused_where_a_row_takes_two_calls():
    kwargs = {"presence_penalty": 0.5, "seed": 3, "structured_outputs": {"regex": "x"}}
    problems = rollout_settings_problems(
        settings(generation_kwargs=kwargs, vllm_structured_outputs_regex="y")
    )
    assert [p.split(":")[0] for p in problems] == [
        "generation_kwargs", "generation_kwargs", "generation_kwargs", "vllm_structured_outputs_regex",
    ]  # fmt: skip
    assert all("enforce_caps_in_generation: false" in p for p in problems)
    assert (
        rollout_settings_problems(settings(generation_kwargs=kwargs, enforce_caps_in_generation=False)) == []
    )
    # transformers' continuous batching samples a row in two calls too
    cb = settings(
        use_vllm=False, use_transformers_continuous_batching=True, generation_kwargs={"min_tokens": 4}
    )
    assert len(rollout_settings_problems(cb)) == 1


def test_vllm_temperatures_and_tensor_parallel_colocate():
    problems = rollout_settings_problems(settings(temperature=2.5, vllm_tensor_parallel_size=2))
    assert problems[0] == "temperature: 2.5 is outside vLLM's range [0, 2]"
    assert problems[1].startswith("vllm_tensor_parallel_size: 2 with vllm_mode colocate is not supported")
    assert rollout_settings_problems(settings(vllm_mode="server", vllm_tensor_parallel_size=2)) == []

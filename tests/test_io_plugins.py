"""Entry points (routing_grpo.io.plugins): the names a group holds in the installed packages' metadata, and the
object a name points at. The miniature declares its tasks and models in pyproject.toml."""

from routing_grpo.io.plugins import entry_point_names, load_entry_point


def test_the_names_of_a_group_are_sorted_and_include_the_miniatures():
    names = entry_point_names("routing_grpo.tasks")
    assert names == sorted(names)
    assert {"mini", "mini_graded"} <= set(names)
    assert "mini_graded_blind" in entry_point_names("routing_grpo.offline_models")


def test_a_name_loads_the_object_it_points_at():
    from routing_grpo.mini import plugin

    assert load_entry_point("routing_grpo.tasks", "mini") is plugin.mini_task
    assert load_entry_point("routing_grpo.report_parts", "oracle") is plugin.report_part


def test_an_unknown_name_or_group_is_none():
    assert load_entry_point("routing_grpo.tasks", "no_such_task") is None
    assert load_entry_point("routing_grpo.tasks", "") is None
    assert entry_point_names("routing_grpo.no_such_group") == []

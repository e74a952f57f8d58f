"""The subcommands of ``routing-grpo`` other than ``train``: one module each, with ``make_parser(subparsers)``
and ``run(args)`` (routing_grpo.cli lists and dispatches them)."""

from routing_grpo.cli import main

raise SystemExit(main())

import sys

from routing_grpo.cli import main

sys.exit(main())

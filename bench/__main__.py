import sys

from bench.planner_vs_torchrec import main

sys.exit(main())

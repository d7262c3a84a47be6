"""python -m soak          the run (scripts/soak.sh sets its environment)
python -m soak selftest  the checkers on fabricated records (planted faults)
python -m soak plot OUT  redraw OUT/soak.png from OUT/nodes.csv"""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "selftest":
    from .selftest import main
elif len(sys.argv) > 1 and sys.argv[1] == "plot":
    from .plot import main
else:
    from .run import main

sys.exit(main())

import sys

from pcgbench.cli import main

sys.exit(main())

import sys

from syncd.cli import main

sys.exit(main())

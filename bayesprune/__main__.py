import sys

from bayesprune.cli import main

sys.exit(main())

import sys

from dtnet.cli import main

sys.exit(main())
